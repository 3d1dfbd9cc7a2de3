package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/console"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// A refused call is in the journal (page and JSON), with a link to its
// approval; the filters take globs, a status of refused, text and time.
func TestJournalShowsRefusals(t *testing.T) {
	g := newGateway(t)
	base := serveConsole(t, g)
	ctx := context.Background()
	if _, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "fail", Arguments: json.RawMessage(`{"text":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	id := pendingNote(t, g, "alice", "needs a yes")
	_, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "note", Arguments: json.RawMessage(`{"text":1}`)})
	if err == nil {
		t.Fatal("an invalid call succeeded")
	}
	journal := func(q string) []console.Call {
		t.Helper()
		code, body := request(t, "GET", base+"/ui/api/journal?"+q, "ops-tok", "")
		if code != http.StatusOK {
			t.Fatalf("journal %s: %d %s", q, code, body)
		}
		var page struct {
			Calls []console.Call `json:"calls"`
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		return page.Calls
	}
	all := journal("")
	if len(all) != 3 || !all[0].Refused || all[0].ErrorClass != "validation" || all[1].ApprovalID != id || all[2].Refused {
		t.Fatalf("journal: %+v", all)
	}
	for q, want := range map[string]int{
		"status=refused":                2,
		"tool=" + url.QueryEscape("n*"): 2,
		"tool=f%3F%3F%3F":               1,
		"class=approval_required":       1,
		"q=" + id[len(id)-6:]:           1,
		"since=1h":                      3,
		"until=2000-01-01T00:00":        0,
	} {
		if got := journal(q); len(got) != want {
			t.Errorf("journal?%s: %d calls, want %d", q, len(got), want)
		}
	}
	for _, q := range []string{"tool=%5B", "since=yesterday"} {
		if code, body := request(t, "GET", base+"/ui/api/journal?"+q, "ops-tok", ""); code != http.StatusBadRequest {
			t.Errorf("journal?%s: %d %s, want 400", q, code, body)
		}
	}
	// The page: the refusal's row, its class, its step, the approval link,
	// relative times with the absolute time as a title.
	code, body := request(t, "GET", base+"/ui/journal?status=refused", "ops-tok", "")
	if code != http.StatusOK {
		t.Fatalf("journal page: %d", code)
	}
	for _, want := range []string{`class="refused"`, "approval_required", "at approve", `href="/ui/approvals/` + id + `"`, `<time datetime="`, ` UTC">`} {
		if !strings.Contains(body, want) {
			t.Errorf("the journal page lacks %q", want)
		}
	}
	// A refusal's own page.
	code, body = request(t, "GET", base+"/ui/api/journal/"+all[0].ID, "ops-tok", "")
	if code != http.StatusOK || !strings.Contains(body, `"refused": true`) {
		t.Errorf("a refusal's call: %d %s", code, body)
	}
}

// An uncertain call is resolved from the console, with a reason; the
// form is on its page.
func TestResolveUncertainFromConsole(t *testing.T) {
	st, err := sqlite.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rules, err := policy.NewRules([]policy.Rule{{Caller: "ops", Allow: []string{"lost"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: st, Policy: rules, Operators: []string{"ops"}})
	if err := g.Register(context.Background(), tool.Tool{Name: "lost", InputSchema: json.RawMessage(`{"type":"object"}`), Backend: tool.BackendFunc(
		func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return nil, errors.New("the connection broke")
		})}); err != nil {
		t.Fatal(err)
	}
	base := serveConsole(t, g)
	_, err = g.Call(context.Background(), gateway.CallRequest{Caller: "ops", Tool: "lost", Arguments: json.RawMessage(`{}`)})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.CallID == "" {
		t.Fatalf("the lost call: %v", err)
	}
	id := ge.CallID
	if in, _ := g.GetIntent(context.Background(), id); in == nil || in.Status != "uncertain" {
		t.Fatalf("the call is %+v, want uncertain", in)
	}
	code, body := request(t, "GET", base+"/ui/journal/"+id, "ops-tok", "")
	if code != http.StatusOK || !strings.Contains(body, `action="/ui/journal/`+id+`/resolve"`) {
		t.Fatalf("the call page has no resolve form: %d", code)
	}
	if code, body = request(t, "POST", base+"/ui/api/journal/"+id+"/resolve", "ops-tok", `{"executed":false}`); code != http.StatusBadRequest {
		t.Errorf("a resolution without a reason: %d %s, want 400", code, body)
	}
	code, body = request(t, "POST", base+"/ui/api/journal/"+id+"/resolve", "ops-tok", `{"executed":false,"reason":"the server log shows no request"}`)
	if code != http.StatusOK || !strings.Contains(body, `"status": "not_executed"`) || !strings.Contains(body, `"resolved_by": "ops"`) {
		t.Fatalf("resolve: %d %s", code, body)
	}
	if code, body = request(t, "POST", base+"/ui/api/journal/"+id+"/resolve", "ops-tok", `{"executed":true,"reason":"again"}`); code != http.StatusConflict {
		t.Errorf("resolving twice: %d %s, want 409", code, body)
	}
}

// The overview counts calls by outcome, in its JSON and its charts.
func TestOverviewCounts(t *testing.T) {
	g := newGateway(t)
	base := serveConsole(t, g)
	for range 2 {
		if _, err := g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "fail", Arguments: json.RawMessage(`{"text":"x"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	pendingNote(t, g, "alice", "one")
	code, body := request(t, "GET", base+"/ui/api/overview?range=15m", "ops-tok", "")
	var o console.Overview
	if code != http.StatusOK || json.Unmarshal([]byte(body), &o) != nil {
		t.Fatalf("overview: %d %s", code, body)
	}
	if o.Totals["tool_error"] != 2 || o.Totals["refused:approval_required"] != 1 || o.Pending != 1 || o.Settled != 2 {
		t.Errorf("overview: %+v", o)
	}
	code, body = request(t, "GET", base+"/ui/overview?range=15m", "ops-tok", "")
	if code != http.StatusOK || !strings.Contains(body, `id="chart-calls"`) || !strings.Contains(body, `data-total="3"`) {
		t.Errorf("the overview page's calls chart does not count 3 calls: %d", code)
	}
	if !strings.Contains(body, `id="chart-refused"`) || !strings.Contains(body, "approval_required") {
		t.Error("the overview page has no refused chart")
	}
	// The console's first page is the overview.
	req, _ := http.NewRequest("GET", base+"/ui/", nil)
	req.Header.Set("Authorization", "Bearer ops-tok")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/ui/overview" {
		t.Errorf("/ui/ redirects to %q, want /ui/overview", loc)
	}
}

// An approval card says which rule asked and who may decide.
func TestApprovalCardSaysWhy(t *testing.T) {
	g := newGateway(t)
	base := serveConsole(t, g)
	id := pendingNote(t, g, "alice", "why")
	code, body := request(t, "GET", base+"/ui/api/approvals/"+id, "ops-tok", "")
	var a console.Approval
	if code != http.StatusOK || json.Unmarshal([]byte(body), &a) != nil || a.Why == nil {
		t.Fatalf("approval: %d %s", code, body)
	}
	if a.Why.Effect != "approve" || a.Why.Rule == "" || a.Why.AnyOperator || len(a.Why.Deciders) != 1 || a.Why.Deciders[0] != "ops" {
		t.Errorf("why: %+v", a.Why)
	}
	code, body = request(t, "GET", base+"/ui/approvals", "ops-tok", "")
	if code != http.StatusOK || !strings.Contains(body, "Why it asks") || !strings.Contains(body, "Who may decide") || !strings.Contains(body, `class="pending-item"`) {
		t.Errorf("the approvals page: %d lacks the why section or the compact list", code)
	}
}
