package server_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
)

// elicitor is a client's elicitation handler that answers as told and
// records what it was asked.
type elicitor struct {
	mu     sync.Mutex
	asked  []*mcp.ElicitParams
	answer *mcp.ElicitResult
	fail   bool
}

func (e *elicitor) handle(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked = append(e.asked, req.Params)
	if e.fail {
		return nil, errors.New("the person closed the window")
	}
	return e.answer, nil
}

func (e *elicitor) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.asked)
}

func approvalsOf(t *testing.T, st store.Store, tool string) []store.Approval {
	t.Helper()
	list, err := st.ListApprovals(context.Background(), store.ApprovalFilter{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Approval
	for _, a := range list {
		if a.Tool == tool {
			out = append(out, a)
		}
	}
	return out
}

func TestElicitationApproves(t *testing.T) {
	f := newFixture(t)
	e := &elicitor{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: 20 * time.Second}), &mcp.ClientOptions{ElicitationHandler: e.handle})
	res := call(t, cs, "danger", map[string]any{"target": "prod-db"})
	if res.IsError {
		t.Fatalf("approved call failed: %s", text(res))
	}
	if f.dangers.Load() != 1 || e.count() != 1 {
		t.Fatalf("invoked %d times, asked %d times; want 1 and 1", f.dangers.Load(), e.count())
	}
	aprs := approvalsOf(t, f.st, "danger")
	if len(aprs) != 1 {
		t.Fatalf("%d approval requests", len(aprs))
	}
	a := aprs[0]
	if a.Status != store.ApprovalApproved || a.DecidedBy != "alice" || a.Channel != "elicitation" || a.ConsumedBy == "" {
		t.Errorf("approval %+v", a)
	}
	msg := e.asked[0].Message
	for _, want := range []string{"alice", "danger", a.ArgsDigest, "prod-db", a.ID} {
		if !strings.Contains(msg, want) {
			t.Errorf("the elicitation message does not show %q:\n%s", want, msg)
		}
	}
	if s, _ := e.asked[0].RequestedSchema.(map[string]any); s == nil || s["properties"].(map[string]any)["approve"] == nil {
		t.Errorf("requested schema %v, want a boolean approve", e.asked[0].RequestedSchema)
	}
}

func TestElicitationDenies(t *testing.T) {
	for name, answer := range map[string]*mcp.ElicitResult{
		"decline":       {Action: "decline"},
		"cancel":        {Action: "cancel"},
		"approve=false": {Action: "accept", Content: map[string]any{"approve": false}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			e := &elicitor{answer: answer}
			cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: 20 * time.Second}), &mcp.ClientOptions{ElicitationHandler: e.handle})
			res := call(t, cs, "danger", map[string]any{"target": "prod-db"})
			sc := structured(t, res)
			if !res.IsError || sc["class"] != "forbidden" || sc["step"] != "approve" {
				t.Fatalf("result %v: %s", sc, text(res))
			}
			if f.dangers.Load() != 0 {
				t.Error("a denied call ran")
			}
			aprs := approvalsOf(t, f.st, "danger")
			if len(aprs) != 1 || aprs[0].Status != store.ApprovalDenied || aprs[0].DecidedBy != "alice" || aprs[0].Channel != "elicitation" {
				t.Errorf("approvals %+v", aprs)
			}
		})
	}
}

// A client without the elicitation capability is never sent
// elicitation/create: the call waits for a decision taken elsewhere, with
// progress notifications, and runs once approved.
func TestWaitForOperatorWithProgress(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var progress []*mcp.ProgressNotificationParams
	gotProgress := make(chan struct{}, 1)
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: 20 * time.Second}), &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, req.Params)
			mu.Unlock()
			select {
			case gotProgress <- struct{}{}:
			default:
			}
		},
	})

	// The operator approves once the client has been told the call waits.
	decided := make(chan error, 1)
	go func() {
		select {
		case <-gotProgress:
		case <-time.After(15 * time.Second):
			decided <- errors.New("no progress notification within 15s")
			return
		}
		aprs := approvalsOf(t, f.st, "danger")
		if len(aprs) != 1 || aprs[0].Status != store.ApprovalPending {
			decided <- errors.New("no pending approval request")
			return
		}
		decided <- f.st.DecideApproval(context.Background(), aprs[0].ID, store.ApprovalDecision{Approve: true, By: "carol", At: time.Now()})
	}()

	params := &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"target": "prod-db"}}
	params.SetProgressToken("tok-1")
	start := time.Now()
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-decided; err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("the approved call failed: %s", text(res))
	}
	if f.dangers.Load() != 1 {
		t.Errorf("invoked %d times", f.dangers.Load())
	}
	if time.Since(start) > 15*time.Second {
		t.Errorf("the call returned after %s: the decision did not release it", time.Since(start))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 {
		t.Fatal("no progress notification")
	}
	p := progress[0]
	aprs := approvalsOf(t, f.st, "danger")
	if p.ProgressToken != "tok-1" || p.Progress <= 0 || !strings.Contains(p.Message, aprs[0].ID) {
		t.Errorf("progress %+v", p)
	}
	if aprs[0].DecidedBy != "carol" {
		t.Errorf("decided by %q", aprs[0].DecidedBy)
	}
}

func TestApprovalRequiredAfterWait(t *testing.T) {
	f := newFixture(t)
	// The elicitation fails: the request stays pending and the wait applies.
	e := &elicitor{fail: true}
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: 300 * time.Millisecond}),
		&mcp.ClientOptions{ElicitationHandler: e.handle})
	start := time.Now()
	res := call(t, cs, "danger", map[string]any{"target": "x"})
	sc := structured(t, res)
	if !res.IsError || sc["class"] != "approval_required" {
		t.Fatalf("result %v", sc)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("returned after %s, before the wait of 300ms", d)
	}
	id, _ := sc["details"].(map[string]any)["approval_id"].(string)
	if id == "" || !strings.Contains(text(res), "backplane approvals approve "+id) {
		t.Errorf("no approval id or hint: %v\n%s", sc, text(res))
	}
	if e.count() != 1 {
		t.Errorf("asked %d times", e.count())
	}

	// No wait at all: at once.
	cs2 := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: 0}), nil)
	start = time.Now()
	res = call(t, cs2, "danger", map[string]any{"target": "y"})
	if c := structured(t, res)["class"]; c != "approval_required" || time.Since(start) > 5*time.Second {
		t.Errorf("class %v after %s", c, time.Since(start))
	}
	if f.dangers.Load() != 0 {
		t.Error("an unapproved call ran")
	}
}

func TestElicitationOverHTTP(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}, ApprovalWait: 20 * time.Second})
	hs := httpServer(t, s)
	e := &elicitor{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	cs, err := connectHTTP(t, hs, "tok-alice", &mcp.ClientOptions{ElicitationHandler: e.handle})
	if err != nil {
		t.Fatal(err)
	}
	res := call(t, cs, "danger", map[string]any{"target": "prod-db"})
	if res.IsError || f.dangers.Load() != 1 {
		t.Fatalf("isError %v, invoked %d: %s", res.IsError, f.dangers.Load(), text(res))
	}
	aprs := approvalsOf(t, f.st, "danger")
	if len(aprs) != 1 || aprs[0].DecidedBy != "alice" || aprs[0].Channel != "elicitation" || aprs[0].Session != cs.ID() {
		t.Errorf("approval %+v, want decided by alice through elicitation", aprs)
	}
}

// TestApprovalMessageSaysItOnce: the text an agent reads of an
// approval_required answer says how to decide once, with real commands:
// no placeholder (NAME, OPERATOR, WHY) to fill in (issue 26, item 6: the
// instructions were repeated, with two placeholders).
func TestApprovalMessageSaysItOnce(t *testing.T) {
	f := newFixture(t)
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice"}), nil)
	res := call(t, cs, "danger", map[string]any{"target": "x"})
	sc := structured(t, res)
	if !res.IsError || sc["class"] != "approval_required" {
		t.Fatalf("result %v", sc)
	}
	id, _ := sc["details"].(map[string]any)["approval_id"].(string)
	msg := text(res)
	if n := strings.Count(msg, "backplane approvals approve "+id); n != 1 {
		t.Errorf("the approve command appears %d times, want once:\n%s", n, msg)
	}
	for _, placeholder := range []string{"NAME", "OPERATOR", "WHY"} {
		if strings.Contains(msg, placeholder) {
			t.Errorf("the message has the placeholder %s:\n%s", placeholder, msg)
		}
	}
}
