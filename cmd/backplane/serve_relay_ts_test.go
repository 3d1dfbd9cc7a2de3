package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests of this file put the built `backplane serve` between the
// official TypeScript SDK client (testdata/mcp-client/client.mjs) and the
// real server-everything, each a process of its own: what the upstream
// sends during a call (progress, sampling, elicitation, roots requests)
// reaches the client that made the call, the client's cancellation reaches
// the upstream, a client that drops its HTTP connection mid-call resumes
// and gets the answer, and the upstream's resources are read through.
//
// The upstream runs behind `tee`, which copies what Backplane writes to it
// (one JSON-RPC message a line) into a file the test reads: the way to see
// that a notifications/cancelled reached it, and that a resumed call was
// not sent twice.

// Values the client answers with, or sends, that the test looks for on
// the other side: each is unlikely to appear by chance.
const (
	relaySampled   = "the sampled answer 6093"
	relayPrompt    = "say 6093"
	relayElicited  = "Ada Lovelace 7314"
	relayRootURI   = "file:///work/ts-project-8842"
	relayRootName  = "ts-project-8842"
	relayDocURI    = "demo://resource/static/document/architecture.md"
	cancelDuration = 10 // seconds: the cancelled call's, unique among the calls
	resumeDuration = 3  // seconds: the resumed call's, unique among the calls
)

// relayPolicy lets alice call every tool and read one document; the tools
// that are not read-only ask, and the calling client approves them itself
// (Backplane's elicitation), before the upstream's own requests.
const relayPolicy = `policy:
  - caller: alice
    allow: ["*"]
    approve: [everything.trigger-sampling-request, everything.trigger-elicitation-request]
    self_approve: true
    resources: [` + "\"" + relayDocURI + "\"" + `]
`

// relayServer writes the configuration: the given operators and policy,
// server-everything behind tee with sampling bridged. It returns the folder
// and the file tee writes.
func relayServer(t *testing.T, policy string) (*gwDir, string) {
	t.Helper()
	_, script := tsClient(t)
	everything := filepath.Join(filepath.Dir(filepath.Dir(script)), "mcp-peers", "node_modules", ".bin", "mcp-server-everything")
	if _, err := os.Stat(everything); err != nil {
		t.Skip("server-everything is not installed (npm ci in testdata/mcp-peers): " + err.Error())
	}
	sh := "/bin/sh"
	if _, err := os.Stat(sh); err != nil {
		t.Skip("/bin/sh is missing: the upstream cannot run behind tee: " + err.Error())
	}
	upLog := filepath.Join(t.TempDir(), "to-upstream.jsonl")
	g := newGWDir(t, policy+`builtin: {enable: []}
servers:
  - name: everything
    command: [`+jsonString(sh)+`, "-c", "tee -a \"$0\" | exec \"$1\"", `+jsonString(upLog)+`, `+jsonString(everything)+`]
    validator: draft2020-12
    bridge: {sampling: true}
serve:
  stdio_caller: alice
  tokens: {"alice-token": alice}
  approval_wait: 30s
`)
	return g, upLog
}

// relayPlan is client.mjs's plan: the client declares sampling, elicitation
// and roots and answers each with fixed values; the calls exercise each
// relay; with resume, one call drops its connection at its first progress
// notification and resumes.
func relayPlan(resume bool) string {
	calls := []string{
		`{"name":"everything.trigger-long-running-operation","arguments":{"duration":2,"steps":4},"progress":true}`,
		`{"name":"everything.trigger-sampling-request","arguments":{"prompt":` + jsonString(relayPrompt) + `,"maxTokens":20}}`,
		`{"name":"everything.trigger-elicitation-request","arguments":{}}`,
		`{"name":"everything.get-roots-list","arguments":{}}`,
		fmt.Sprintf(`{"name":"everything.trigger-long-running-operation","arguments":{"duration":%d,"steps":%d},"cancelAfterProgress":1}`, cancelDuration, cancelDuration),
	}
	if resume {
		calls = append(calls, fmt.Sprintf(`{"name":"everything.trigger-long-running-operation","arguments":{"duration":%d,"steps":%d},"resumeAfterProgress":1}`, resumeDuration, resumeDuration))
	}
	return `{"client":{
  "sampling":{"model":"ts-test-model","text":` + jsonString(relaySampled) + `},
  "elicitation":{"content":{"name":` + jsonString(relayElicited) + `,"check":true},
    "byPrefix":[{"prefix":"Backplane approval request","content":{"approve":true}}]},
  "roots":[{"uri":` + jsonString(relayRootURI) + `,"name":` + jsonString(relayRootName) + `}]},
"calls":[` + strings.Join(calls, ",\n") + `],
"steps":[{"op":"resources"},{"op":"read","uri":` + jsonString(relayDocURI) + `}]}`
}

// relayReport is the part of client.mjs's report these tests read.
type relayReport struct {
	ConnectError json.RawMessage `json:"connectError"`
	Calls        []struct {
		Name   string `json:"name"`
		Result *struct {
			IsError bool                          `json:"isError"`
			Content []struct{ Type, Text string } `json:"content"`
		} `json:"result"`
		Error *struct {
			Code    any    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Progress []struct {
			Progress float64 `json:"progress"`
			Total    float64 `json:"total"`
		} `json:"progress"`
		Wire *struct {
			Progress    []float64 `json:"progress"`
			AfterAnswer int       `json:"afterAnswer"`
		} `json:"wire"`
		ProgressBeforeDrop int             `json:"progressBeforeDrop"`
		ResumedWith        string          `json:"resumedWith"`
		FirstConnection    json.RawMessage `json:"firstConnection"`
		AnsweredBeforeDrop json.RawMessage `json:"answeredBeforeDrop"`
	} `json:"calls"`
	Steps []struct {
		Op     string          `json:"op"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	} `json:"steps"`
	Requests []struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	} `json:"requests"`
}

func runRelayClient(t *testing.T, g *gwDir, plan string, args ...string) relayReport {
	t.Helper()
	rep, stderr := runTSClient(t, g, plan, args...)
	if rep.ConnectError != nil {
		t.Fatalf("connect: %+v\n%s", rep.ConnectError, stderr)
	}
	var r relayReport
	if err := json.Unmarshal(rep.raw, &r); err != nil {
		t.Fatalf("report: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("client stderr:\n%s", stderr)
		}
	})
	return r
}

func callJSON(c any) string {
	b, _ := json.Marshal(c)
	return string(b)
}

// checkRelay checks the answers every transport must give.
func checkRelay(t *testing.T, g *gwDir, upLog string, r relayReport, wantCalls int) {
	t.Helper()
	if len(r.Calls) != wantCalls {
		t.Fatalf("%d calls reported, want %d: %+v", len(r.Calls), wantCalls, r.Calls)
	}
	text := func(i int) string {
		c := r.Calls[i]
		if c.Result == nil || c.Result.IsError || len(c.Result.Content) == 0 {
			t.Errorf("%s: %s", c.Name, callJSON(c))
			return ""
		}
		var all []string
		for _, ct := range c.Result.Content {
			all = append(all, ct.Text)
		}
		return strings.Join(all, "\n")
	}

	// Progress: the upstream's four steps arrived, in order, under the
	// client's own token, each before the call's answer. (The SDK itself
	// may drop the last one, read with the answer: see tapWire in
	// client.mjs; what it handed over must be a prefix of that.)
	if w := r.Calls[0].Wire; w == nil || fmt.Sprint(w.Progress) != "[1 2 3 4]" || w.AfterAnswer != 0 {
		t.Errorf("progress on the wire %+v, want [1 2 3 4], none after the answer", w)
	}
	var steps []float64
	for _, p := range r.Calls[0].Progress {
		if p.Total != 4 {
			t.Errorf("progress total %v, want 4", p.Total)
		}
		steps = append(steps, p.Progress)
	}
	if len(steps) < 3 || !strings.HasPrefix("[1 2 3 4]", strings.TrimSuffix(fmt.Sprint(steps), "]")) {
		t.Errorf("progress handed over by the SDK %v, want [1 2 3] or [1 2 3 4]", steps)
	}
	if s := text(0); !strings.Contains(s, "Duration: 2 seconds, Steps: 4") {
		t.Errorf("long-running operation: %q", s)
	}

	// Sampling: the client was asked with the tool's prompt, and its
	// answer is in the tool's result.
	if s := text(1); !strings.Contains(s, relaySampled) || !strings.Contains(s, "ts-test-model") {
		t.Errorf("sampling: the result %q lacks the client's answer", s)
	}
	// Elicitation: the client's content is in the tool's result.
	if s := text(2); !strings.Contains(s, relayElicited) {
		t.Errorf("elicitation: the result %q lacks the client's answer", s)
	}
	// Roots: the client's root, listed by the upstream.
	if s := text(3); !strings.Contains(s, relayRootURI) || !strings.Contains(s, relayRootName) {
		t.Errorf("roots: the result %q lacks the client's root", s)
	}
	// What the client was asked: two approvals by Backplane, and each
	// upstream request once.
	asked := map[string]int{}
	for _, q := range r.Requests {
		var p struct {
			Message  string `json:"message"`
			Messages []struct {
				Content struct{ Text string } `json:"content"`
			} `json:"messages"`
		}
		json.Unmarshal(q.Params, &p)
		switch {
		case q.Method == "elicitation/create" && strings.HasPrefix(p.Message, "Backplane approval request"):
			asked["approval"]++
		// Relayed, the upstream's form names its server (issue 22, 11).
		case q.Method == "elicitation/create" && p.Message == "[asked by MCP server everything, not by Backplane] Please provide inputs for the following fields:":
			asked["upstream elicitation"]++
		case q.Method == "sampling/createMessage" && len(p.Messages) == 1 && strings.Contains(p.Messages[0].Content.Text, relayPrompt):
			asked["sampling"]++
		case q.Method == "roots/list":
			asked["roots"]++
		default:
			asked["other "+q.Method]++
		}
	}
	if want := map[string]int{"approval": 2, "upstream elicitation": 1, "sampling": 1, "roots": 1}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("the client was asked %v, want %v", asked, want)
	}

	// Cancellation: the client's call ended with an error after its first
	// progress notification, and the upstream received
	// notifications/cancelled for the very request Backplane had sent it.
	c := r.Calls[4]
	if c.Error == nil || c.Result != nil || len(c.Progress) != 1 {
		t.Errorf("the cancelled call: %s", callJSON(c))
	}
	waitFor(t, "notifications/cancelled to reach the upstream", func() bool {
		id, sent := upstreamCall(t, upLog, cancelDuration)
		return sent == 1 && upstreamCancelled(t, upLog, id)
	})

	// Resources: the one granted is listed alone, and reads as the
	// upstream's file.
	if len(r.Steps) != 2 {
		t.Fatalf("steps %+v", r.Steps)
	}
	var list struct {
		Resources []struct{ URI string } `json:"resources"`
	}
	json.Unmarshal(r.Steps[0].Result, &list)
	if len(list.Resources) != 1 || list.Resources[0].URI != relayDocURI {
		t.Errorf("resources/list: %s %s, want %s alone", r.Steps[0].Result, r.Steps[0].Error, relayDocURI)
	}
	_, script := tsClient(t)
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(script)), "mcp-peers", "node_modules",
		"@modelcontextprotocol", "server-everything", "dist", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	var read struct {
		Contents []struct{ URI, Text string } `json:"contents"`
	}
	json.Unmarshal(r.Steps[1].Result, &read)
	if len(read.Contents) != 1 || read.Contents[0].URI != relayDocURI || read.Contents[0].Text != string(doc) {
		t.Errorf("resources/read %s: %.200s %s", relayDocURI, r.Steps[1].Result, r.Steps[1].Error)
	}

	// The journal: the cancelled call is uncertain (the upstream had it and
	// never answered); the others succeeded.
	waitFor(t, "the cancelled call to settle", func() bool {
		for _, in := range g.journal(t) {
			if in["status"] == "started" {
				return false
			}
		}
		return true
	})
	status := map[string]int{}
	for _, in := range g.journal(t) {
		status[fmt.Sprint(in["tool"], " ", in["status"])]++
	}
	if status["everything.trigger-long-running-operation uncertain"] != 1 {
		t.Errorf("journal %v: want the cancelled call uncertain", status)
	}
}

// upstreamMessages decodes what Backplane wrote to the upstream.
func upstreamMessages(t *testing.T, upLog string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(upLog)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// upstreamCall finds the tools/call of trigger-long-running-operation with
// the given duration that Backplane sent upstream: its request id and how
// many such calls were sent.
func upstreamCall(t *testing.T, upLog string, duration int) (id any, sent int) {
	t.Helper()
	for _, m := range upstreamMessages(t, upLog) {
		p, _ := m["params"].(map[string]any)
		if m["method"] != "tools/call" || p["name"] != "trigger-long-running-operation" {
			continue
		}
		if a, _ := p["arguments"].(map[string]any); a["duration"] == float64(duration) {
			id, sent = m["id"], sent+1
		}
	}
	return id, sent
}

func upstreamCancelled(t *testing.T, upLog string, id any) bool {
	t.Helper()
	for _, m := range upstreamMessages(t, upLog) {
		if p, _ := m["params"].(map[string]any); m["method"] == "notifications/cancelled" && p["requestId"] == id {
			return true
		}
	}
	return false
}

// Over stdio: progress, sampling, elicitation, roots, cancellation and
// resources between the TypeScript SDK client and server-everything.
func TestServeRelayStdioTypeScriptClient(t *testing.T) {
	g, upLog := relayServer(t, relayPolicy)
	r := runRelayClient(t, g, relayPlan(false), "--stdio", "--", binary, "serve", "--stdio")
	checkRelay(t, g, upLog, r, 5)
}

// Over streamable HTTP, the same, and a call whose connection drops at its
// first progress notification: the client resumes on a new connection of
// the same session with the last event id, and gets the answer; the
// upstream was asked once.
func TestServeRelayHTTPTypeScriptClient(t *testing.T) {
	g, upLog := relayServer(t, relayPolicy)
	p := startServe(t, g)
	r := runRelayClient(t, g, relayPlan(true), "--http", p.base+"/mcp", "--token", "alice-token")
	if t.Failed() {
		t.Logf("serve:\n%s", p.log())
	}
	checkRelay(t, g, upLog, r, 6)

	c := r.Calls[5]
	if c.AnsweredBeforeDrop != nil {
		t.Fatalf("the call was answered before its connection dropped: %s", c.AnsweredBeforeDrop)
	}
	if c.ProgressBeforeDrop != 1 || c.ResumedWith == "" {
		t.Errorf("drop after %d progress notifications, resumed with %q", c.ProgressBeforeDrop, c.ResumedWith)
	}
	if !strings.Contains(string(c.FirstConnection), "error") {
		t.Errorf("the dropped connection's call did not fail: %s", c.FirstConnection)
	}
	want := fmt.Sprintf("Duration: %d seconds, Steps: %d", resumeDuration, resumeDuration)
	if c.Result == nil || c.Result.IsError || len(c.Result.Content) == 0 || !strings.Contains(c.Result.Content[0].Text, want) {
		t.Errorf("the resumed call: %s\nserve:\n%s", callJSON(c), p.log())
	}
	if _, sent := upstreamCall(t, upLog, resumeDuration); sent != 1 {
		t.Errorf("the resumed call was sent upstream %d times, want once", sent)
	}
	if err := p.stop(t); err != nil {
		t.Errorf("serve exited with %v after SIGTERM:\n%s", err, p.log())
	}
}

// waitFor polls cond until it holds, failing the test after 20 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A call waiting for an operator's approval over streamable HTTP drops its
// connection at the first progress notification of the wait; the client
// resumes on a new connection of the same session with the last event id;
// an operator approves from another process meanwhile; the answer reaches
// the client on the resumed stream, and the upstream ran the call once.
func TestServeRelayHTTPResumeDuringApproval(t *testing.T) {
	node, script := tsClient(t)
	// echo is read-only, so only the approve entry makes it wait, for
	// operator ops.
	g, upLog := relayServer(t, `operators:
  - {name: ops, token: ops-token}
policy:
  - caller: alice
    allow: ["*"]
    approve: [everything.echo]
    approvers: [ops]
`)
	p := startServe(t, g)
	const message = "approved after the drop 5127"
	plan := `{"calls":[{"name":"everything.echo","arguments":{"message":` + jsonString(message) + `},"resumeAfterProgress":1}]}`
	planFile := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(planFile, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, "--plan", planFile, "--http", p.base+"/mcp", "--token", "alice-token")
	cmd.Dir, cmd.Env = g.dir, g.env
	var out bytes.Buffer
	var errOut lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once the client has exited
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})

	var id string
	waitFor(t, "a pending approval of everything.echo", func() bool {
		for aid, a := range g.approvalsByID(t, "--status", "pending") {
			if a["tool"] == "everything.echo" && a["caller"] == "alice" {
				id = aid
			}
		}
		return id != ""
	})
	// Approve only once the client has dropped its connection and resumed.
	waitFor(t, "the client to resume", func() bool {
		return strings.Contains(errOut.String(), "mcp-client: resuming everything.echo from event ")
	})
	g.operator(t, "approvals", "approve", id).wantCode(t, exitOK)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the client did not finish within 60s of the approval:\n%s\n%s", errOut.String(), p.log())
	}
	var r relayReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("report %q: %v\n%s", out.String(), err, errOut.String())
	}
	if len(r.Calls) != 1 {
		t.Fatalf("calls %s", out.String())
	}
	c := r.Calls[0]
	if c.AnsweredBeforeDrop != nil || c.ProgressBeforeDrop != 1 || c.ResumedWith == "" {
		t.Errorf("no drop and resume during the wait: %s", callJSON(c))
	}
	if c.Result == nil || c.Result.IsError || len(c.Result.Content) != 1 || c.Result.Content[0].Text != "Echo: "+message {
		t.Errorf("the resumed call: %s\nserve:\n%s", callJSON(c), p.log())
	}
	echoes := 0
	for _, m := range upstreamMessages(t, upLog) {
		if pm, _ := m["params"].(map[string]any); m["method"] == "tools/call" && pm["name"] == "echo" {
			echoes++
		}
	}
	if echoes != 1 {
		t.Errorf("echo sent upstream %d times, want once", echoes)
	}
	if a := g.approvalsByID(t)[id]; a["status"] != "approved" || a["consumed_by"] == nil {
		t.Errorf("approval after the call: %v", a)
	}
}

// lockedBuffer is a process's output the test reads while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
