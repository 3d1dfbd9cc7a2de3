package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Approval semantics through real processes: `backplane serve`, the Go
// SDK's MCP client, and the CLI deciding from another process.

// operatorsConfig: ops is the one operator; alice's write needs an
// operator's approval, her edit may be approved by alice herself through
// her client (self_approve). The wait is filled in by each test.
const operatorsConfig = `operators:
  - name: ops
    token: ops-token
policy:
  - caller: alice
    allow: ["*"]
    approve: [write]
  - caller: alice
    allow: [edit]
    approve: [edit]
    self_approve: true
serve:
  tokens: {"alice-token": alice}
  approval_wait: %s
approvals:
  max_pending: 3
`

func newOperatorsDir(t *testing.T, wait string) *gwDir {
	t.Helper()
	return newGWDir(t, strings.Replace(operatorsConfig, "%s", wait, 1))
}

// elicitCounter answers every elicitation with answer (nil: never answers,
// until the request is cancelled) and counts them.
type elicitCounter struct {
	n       atomic.Int64
	answer  *mcp.ElicitResult
	message atomic.Pointer[string]
}

func (e *elicitCounter) handle(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	e.n.Add(1)
	e.message.Store(&req.Params.Message)
	if e.answer == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return e.answer, nil
}

func connectAlice(t *testing.T, p *serveProc, e *elicitCounter) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if e != nil {
		opts.ElicitationHandler = e.handle
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, opts)
	tr := &mcp.StreamableClientTransport{
		Endpoint:   p.base + "/mcp",
		HTTPClient: &http.Client{Transport: tokenTransport("alice-token")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, tr, sessionEra)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.log())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res, structuredMap(res)
}

func detailsOf(sc map[string]any) map[string]any {
	d, _ := sc["details"].(map[string]any)
	return d
}

// A client that cannot be asked gets approval_required at once, with the
// request id and the exact ways to decide it; a retry gets the same
// request; serve prints the request on its terminal; the operator sees the
// diff; a caller is refused /metrics.
func TestServeApprovalRequiredAtOnce(t *testing.T) {
	g := newOperatorsDir(t, "0s")
	p := startServe(t, g)
	// An elicitation-capable client that declines whatever it is asked:
	// with a wait of 0 it is asked only where a rule sets self_approve.
	e := &elicitCounter{answer: &mcp.ElicitResult{Action: "decline"}}
	cs := connectAlice(t, p, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := os.WriteFile(filepath.Join(g.dir, "notes.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := map[string]any{"path": "notes.txt", "content": "one\nthree\n"}
	res, sc := callTool(t, ctx, cs, "write", args)
	if !res.IsError || sc["class"] != "approval_required" {
		t.Fatalf("write: %+v", sc)
	}
	id, _ := detailsOf(sc)["approval_id"].(string)
	if id == "" {
		t.Fatalf("no approval id: %+v", sc)
	}
	cfgPath := filepath.Join(g.dir, "backplane.yaml")
	hints, _ := json.Marshal(detailsOf(sc)["how_to_decide"])
	for _, want := range []string{"backplane approvals approve " + id + " --config " + cfgPath + "\"", p.base + "/ui/approvals/" + id} {
		if !strings.Contains(string(hints), want) {
			t.Errorf("how_to_decide %s lacks %q", hints, want)
		}
	}

	// The same call again: the same request, never a second.
	_, sc2 := callTool(t, ctx, cs, "write", args)
	if id2, _ := detailsOf(sc2)["approval_id"].(string); id2 != id {
		t.Errorf("retry got request %q, want %q", id2, id)
	}
	if n := e.n.Load(); n != 0 {
		t.Errorf("the client was asked %d times about a write only operators decide", n)
	}
	// self_approve: the client is asked even with a wait of 0 (finding 19
	// of issue 22); it declines, which denies the edit.
	_, sc3 := callTool(t, ctx, cs, "edit", map[string]any{"path": "notes.txt", "content": "x\n"})
	if sc3["class"] != "forbidden" || e.n.Load() != 1 {
		t.Errorf("edit with wait 0, declined by the client: %+v, asked %d times", sc3, e.n.Load())
	}
	pending := g.approvalsByID(t, "--status", "pending")
	if len(pending) != 1 {
		t.Errorf("%d pending requests, want 1 (the write, once; the edit was denied): %v", len(pending), pending)
	}

	// serve's terminal names the request and how to decide it.
	for start := time.Now(); !strings.Contains(p.log(), "approval pending: "+id); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("serve did not print the pending request:\n%s", p.log())
		}
	}
	if !strings.Contains(p.log(), "console: "+p.base+"/ui") {
		t.Errorf("no startup summary with the console URL:\n%s", p.log())
	}

	// The operator sees the tool, its description, the arguments and the diff.
	r := g.run(t, "", "approvals", "show", id, "--json")
	r.wantCode(t, exitOK)
	show := decodeObject(t, r.stdout)
	preview, _ := show["preview"].(map[string]any)
	diff, _ := preview["diff"].(string)
	if show["tool"] != "write" || show["caller"] != "alice" || show["description"] == "" ||
		!strings.Contains(diff, "-two") || !strings.Contains(diff, "+three") {
		t.Errorf("approvals show: %s", r.stdout)
	}
	r = g.run(t, "", "approvals", "show", id)
	r.wantCode(t, exitOK)
	for _, want := range []string{"caller:", "alice", "diff:", "+three", "--config " + cfgPath} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("approvals show lacks %q:\n%s", want, r.stdout)
		}
	}

	// Who decides: not a non-operator, not the caller; ops does.
	g.run(t, "", "approvals", "approve", id, "--as", "carol").wantUsageError(t)
	g.run(t, "", "approvals", "approve", id, "--as", "alice").wantUsageError(t)
	cmd := g.command("", "approvals", "approve", id, "--reason", "checked the diff")
	cmd.Env = append(cmd.Env, "BACKPLANE_OPERATOR_TOKEN=ops-token")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("approve as ops: %v\n%s", err, out)
	}
	res, sc = callTool(t, ctx, cs, "write", args)
	if res.IsError {
		t.Fatalf("the approved retry: %+v", sc)
	}
	if b, _ := os.ReadFile(filepath.Join(g.dir, "notes.txt")); string(b) != "one\nthree\n" {
		t.Errorf("notes.txt = %q", b)
	}
	a := g.approvalsByID(t)[id]
	if a["decided_by"] != "ops" || a["channel"] != "cli" || a["reason"] != "checked the diff" || a["consumed_by"] == nil {
		t.Errorf("the decision: %v", a)
	}

	// The TypeScript SDK's client (no elicitation): approval_required at
	// once, well before its 60s request timeout, with the ways to decide.
	if _, err := os.Stat(filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules")); err == nil {
		rep, stderr := runTSClient(t, g, `{"calls":[{"name":"write","arguments":{"path":"ts.txt","content":"x"}}]}`,
			"--http", p.base+"/mcp", "--token", "alice-token")
		if len(rep.Calls) != 1 || rep.Calls[0].Result == nil {
			t.Fatalf("TypeScript client: %+v\n%s", rep, stderr)
		}
		r := rep.Calls[0].Result
		// write declares an output schema: the error is in _meta.
		ge, _ := r.Meta["backplane/error"].(map[string]any)
		hints, _ := json.Marshal(ge["details"])
		if !r.IsError || ge["class"] != "approval_required" || !strings.Contains(string(hints), "--config "+cfgPath) {
			t.Errorf("TypeScript client's write: %+v", r)
		}
	} else {
		t.Log("the TypeScript SDK client is not installed (npm ci in testdata/mcp-peers): its case is skipped")
	}

	// /metrics: operators only.
	if code, _ := httpGet(t, p.base+"/metrics", "alice-token"); code != http.StatusForbidden {
		t.Errorf("/metrics with a caller's token: %d, want 403", code)
	}
	if code, body := httpGet(t, p.base+"/metrics", "ops-token"); code != http.StatusOK || !strings.Contains(body, "backplane_") {
		t.Errorf("/metrics with the operator's token: %d", code)
	}
}

// A call whose client goes away while it waits never consumes the
// approval: the request stays for the retry, which writes the file, once.
func TestServeOrphanNeverConsumes(t *testing.T) {
	for _, how := range []string{"cancelled", "disconnected"} {
		t.Run(how, func(t *testing.T) {
			g := newOperatorsDir(t, "45s")
			p := startServe(t, g)
			args := map[string]any{"path": "orphan.txt", "content": "x\n"}

			// The first client: its call waits, then it goes away.
			cs := connectAlice(t, p, nil)
			hctx, httpCancel := context.WithCancel(context.Background())
			defer httpCancel()
			if how == "disconnected" {
				// A session whose HTTP requests are cut without a
				// notifications/cancelled: the transport's context ends.
				client := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, nil)
				tr := &mcp.StreamableClientTransport{Endpoint: p.base + "/mcp",
					HTTPClient: &http.Client{Transport: cutTransport{tok: "alice-token", ctx: hctx}}}
				var err error
				if cs, err = client.Connect(context.Background(), tr, sessionEra); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: args})
				done <- err
			}()
			id := waitPending(t, g)
			if how == "cancelled" {
				cancel() // the SDK sends notifications/cancelled
			} else {
				httpCancel() // the connection is cut
			}
			waitAudit(t, g, `"outcome":"withdrawn"`, id)
			cancel()
			<-done

			g.operator(t, "approvals", "approve", id).wantCode(t, exitOK)
			if _, err := os.Stat(filepath.Join(g.dir, "orphan.txt")); err == nil {
				t.Fatal("the orphaned call wrote the file")
			}
			if a := g.approvalsByID(t)[id]; a["status"] != "approved" || a["consumed_by"] != nil {
				t.Fatalf("after the orphan: %v", a)
			}
			// The retry consumes it.
			cs2 := connectAlice(t, p, nil)
			rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer rcancel()
			res, sc := callTool(t, rctx, cs2, "write", args)
			if res.IsError {
				t.Fatalf("the retry: %+v", sc)
			}
			if a := g.approvalsByID(t)[id]; a["consumed_by"] == nil {
				t.Errorf("the retry did not consume request %s: %v", id, a)
			}
			// The retry's audit event is written within serve's flush
			// interval: wait for it, then count.
			commits := func() int { return strings.Count(readAudit(t, g), `"step":"commit","outcome":"ok"`) }
			for start := time.Now(); commits() == 0 && time.Since(start) < 20*time.Second; time.Sleep(50 * time.Millisecond) {
			}
			if n := commits(); n != 1 {
				t.Errorf("%d commits, want 1 (the retry's)", n)
			}
		})
	}
}

// cutTransport adds a token and ties every request to ctx: cancelling ctx
// cuts the connections, as a client that disappears does.
type cutTransport struct {
	tok string
	ctx context.Context
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(c.ctx)
	r.Header.Set("Authorization", "Bearer "+c.tok)
	return http.DefaultTransport.RoundTrip(r)
}

func readAudit(t *testing.T, g *gwDir) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(g.dir, ".backplane", "audit.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// waitPending waits for a pending approval request and returns its id.
func waitPending(t *testing.T, g *gwDir) string {
	t.Helper()
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(50 * time.Millisecond) {
		for id, a := range g.approvalsByID(t) {
			if a["status"] == "pending" {
				return id
			}
		}
	}
	t.Fatal("no pending approval request within 20s")
	return ""
}

// waitAudit waits for an audit event containing marker (and id, if set),
// and returns its approval id: the event's own, or that of one of a call
// event's steps.
func waitAudit(t *testing.T, g *gwDir, marker, id string) string {
	t.Helper()
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(50 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(readAudit(t, g)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, marker) || (id != "" && !strings.Contains(line, id)) {
				continue
			}
			var ev struct {
				ApprovalID string `json:"approval_id"`
				Steps      []struct {
					ApprovalID string `json:"approval_id"`
				} `json:"steps"`
			}
			if json.Unmarshal([]byte(line), &ev) != nil {
				continue
			}
			if ev.ApprovalID != "" {
				return ev.ApprovalID
			}
			for _, s := range ev.Steps {
				if s.ApprovalID != "" && (id == "" || s.ApprovalID == id) {
					return s.ApprovalID
				}
			}
		}
	}
	t.Fatalf("no audit event %s %s within 20s:\n%s", marker, id, readAudit(t, g))
	return ""
}

// Self-approval through the client's elicitation: refused by default (the
// client is not even asked), allowed where a rule opts in; and the pending
// cap refuses a fourth request, creating nothing.
func TestServeSelfApprovalAndPendingCap(t *testing.T) {
	g := newOperatorsDir(t, "3s")
	p := startServe(t, g)
	e := &elicitCounter{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	cs := connectAlice(t, p, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// write: operators only. The client is not asked; after the wait the
	// call returns approval_required.
	res, sc := callTool(t, ctx, cs, "write", map[string]any{"path": "self.txt", "content": "x"})
	if !res.IsError || sc["class"] != "approval_required" || e.n.Load() != 0 {
		t.Fatalf("write: %+v, asked %d", sc, e.n.Load())
	}
	if _, err := os.Stat(filepath.Join(g.dir, "self.txt")); err == nil {
		t.Fatal("a self-approved write ran")
	}
	// edit: the rule sets self_approve: alice's client approves it.
	if err := os.WriteFile(filepath.Join(g.dir, "e.txt"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, sc = callTool(t, ctx, cs, "edit", map[string]any{"path": "e.txt", "content": "new\n"})
	if res.IsError || e.n.Load() != 1 {
		t.Fatalf("self-approved edit: %+v, asked %d", sc, e.n.Load())
	}
	// The person was shown what the edit changes.
	if m := e.message.Load(); m == nil || !strings.Contains(*m, "-old") || !strings.Contains(*m, "+new") {
		t.Errorf("the elicitation did not show the diff: %v", m)
	}
	var editID string
	for id, a := range g.approvalsByID(t) {
		if a["tool"] == "edit" {
			editID = id
			if a["decided_by"] != "alice" || a["channel"] != "elicitation" {
				t.Errorf("the self-approval is recorded as %v", a)
			}
		}
	}
	if editID == "" {
		t.Error("no request for the edit")
	}

	// The cap: 3 pending at most (write self.txt is one).
	var wg sync.WaitGroup
	for _, name := range []string{"b.txt", "c.txt"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			callTool(t, ctx, cs, "write", map[string]any{"path": name, "content": "x"})
		}()
	}
	wg.Wait()
	before := len(g.approvalsByID(t))
	_, sc = callTool(t, ctx, cs, "write", map[string]any{"path": "d.txt", "content": "x"})
	if sc["class"] != "forbidden" || !strings.Contains(sc["message"].(string), "pending") {
		t.Errorf("the fourth pending request: %+v", sc)
	}
	if after := len(g.approvalsByID(t)); after != before {
		t.Errorf("the refused call created a request: %d then %d", before, after)
	}
}

// serve stopped by SIGTERM with a call in flight lets the call finish,
// answers it, and exits 0 without usage text.
func TestServeSIGTERMDrains(t *testing.T) {
	g := newGWDir(t, `policy:
  - caller: alice
    allow: [slow]
tools:
  - name: slow
    description: Answers once the release file exists.
    input_schema: {type: object, additionalProperties: false}
    command: [sh, -c, 'cat >/dev/null; while [ ! -e release ]; do sleep 0.05; done; echo ''{"done":true}''']
serve:
  tokens: {"alice-token": alice}
`)
	p := startServe(t, g)
	cs := connectAlice(t, p, nil)
	// The call's own deadline outlasts the two waits below (20 s each), so
	// a slow machine fails one of them, saying which, rather than the call.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}})
		done <- answer{res, err}
	}()
	// The call is committed and its tool running (the journal says so; its
	// audit event is written when it ends): then SIGTERM.
	for start := time.Now(); !hasStarted(t, g); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the call did not start:\n%s", p.log())
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// serve is draining: let the tool finish.
	for start := time.Now(); !strings.Contains(p.log(), "draining the calls in flight"); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("serve did not start draining after SIGTERM:\n%s", p.log())
		}
	}
	if err := os.WriteFile(filepath.Join(g.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.IsError {
		t.Fatalf("the in-flight call: %v %+v", a.err, a.res)
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not exit after SIGTERM:\n%s", p.log())
	}
	if p.err != nil {
		t.Errorf("serve exited with %v after SIGTERM:\n%s", p.err, p.log())
	}
	if strings.Contains(p.log(), "Usage:") {
		t.Errorf("serve printed usage text on SIGTERM:\n%s", p.log())
	}
	// A clean stop loses no audit event, though the log is buffered: the
	// drained call's is in the file.
	drained := false
	for line := range strings.Lines(readAudit(t, g)) {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) == nil && ev["msg"] == "call" && ev["tool"] == "slow" && ev["outcome"] == "succeeded" {
			drained = true
		}
	}
	if !drained {
		t.Errorf("the drained call's audit event is not in the log after SIGTERM:\n%s", readAudit(t, g))
	}
}

// hasStarted reports whether the journal holds a started intent.
func hasStarted(t *testing.T, g *gwDir) bool {
	t.Helper()
	list, _ := g.runJSON(t, exitOK, "", "journal", "list")["intents"].([]any)
	for _, v := range list {
		if v.(map[string]any)["status"] == "started" {
			return true
		}
	}
	return false
}
