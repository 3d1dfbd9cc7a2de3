package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// rawStdio is a client of ServeStdio that writes and reads the lines
// itself, so that a test sees the exact bytes of each answer and the
// server's allocations are not hidden among a client's.
type rawStdio struct {
	t testing.TB
	w io.WriteCloser
	r *bufio.Reader
}

// rawStdioSession serves s over pipes and initializes a 2025-11-25 session.
func rawStdioSession(t testing.TB, s *server.Server) *rawStdio {
	t.Helper()
	clientR, serverW := io.Pipe()
	serverR, clientW := io.Pipe()
	return rawStdioOver(t, s, serverR, serverW, clientR, clientW)
}

// rawStdioSessionOS is rawStdioSession over the system's pipes, which the
// server's connection reads as serve reads its stdin (polled, in the
// goroutine that asks for the next message), where io.Pipe is read by a
// goroutine of the connection.
func rawStdioSessionOS(t testing.TB, s *server.Server) *rawStdio {
	t.Helper()
	serverR, clientW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	clientR, serverW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return rawStdioOver(t, s, serverR, serverW, clientR, clientW)
}

func rawStdioOver(t testing.TB, s *server.Server, serverR io.ReadCloser, serverW io.WriteCloser, clientR io.ReadCloser, clientW io.WriteCloser) *rawStdio {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- s.ServeStdio(serverR, serverW) }()
	c := &rawStdio{t: t, w: clientW, r: bufio.NewReader(clientR)}
	t.Cleanup(func() {
		clientW.Close()
		clientR.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("ServeStdio did not return once the client closed")
		}
	})
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"v0"}}}`)
	if line := c.recv(); !strings.Contains(line, `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize answered %s", line)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *rawStdio) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads the next line, within 10 s.
func (c *rawStdio) recv() string {
	c.t.Helper()
	got := make(chan string, 1)
	go func() {
		line, _ := c.r.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line == "" {
			c.t.Fatal("the server closed its output")
		}
		return strings.TrimSuffix(line, "\n")
	case <-time.After(10 * time.Second):
		c.t.Fatal("no answer within 10s")
		return ""
	}
}

// toSDK is params with one _meta member more, which callTool ignores and
// the stdio connection leaves to the SDK: the same call through the SDK's
// decoding.
func toSDK(params string) string {
	if i := strings.Index(params, `"_meta":{`); i >= 0 {
		i += len(`"_meta":{`)
		return params[:i] + `"x-test":"sdk",` + params[i:]
	}
	return strings.TrimSuffix(params, "}") + `,"_meta":{"x-test":"sdk"}}`
}

var (
	callIDs     = regexp.MustCompile(`"call_[A-Za-z0-9_-]+"`)
	approvalIDs = regexp.MustCompile(`apr_[A-Za-z0-9_-]+`)
)

// normalized is an answer without what differs from call to call: the
// gateway's call and approval ids.
func normalized(line string) string {
	line = callIDs.ReplaceAllString(line, `"CALL"`)
	return approvalIDs.ReplaceAllString(line, "APPROVAL")
}

// A session's tools/call over stdio is served without the SDK's decoding
// when its params allow (stdiocalls.go): the answer must be byte for byte
// the SDK path's, for results, refusals, failures and protocol errors,
// the arguments reaching the tool as they were sent.
func TestStdioCallsAnswerAsTheSDK(t *testing.T) {
	f := newFixture(t)
	c := rawStdioSession(t, server.New(f.g, &server.Options{StdioCaller: "alice"}))
	for i, params := range []string{
		`{"name":"echo","arguments":{ "text" : "a  b",  "n":  2 }}`,
		`{"name":"echo","arguments":{"text":"<&>\u00e9\"q\""}}`,
		"{\"name\":\"echo\",\"arguments\":{\"text\":\"line\u2028sep \u2029 <b>\"}}",
		`{"arguments":{"text":"x"},"name":"echo"}`,
		`{"name":"echo"}`,
		`{"name":"echo","arguments":{"text":7}}`,
		`{"name":"nope","arguments":{}}`,
		`{"name":"broken","arguments":{}}`,
		`{"name":"upstream","arguments":{}}`,
		`{"name":"dollar","arguments":{}}`,
		`{"name":"echo","arguments":{"text":"traced"},"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`,
		`{"name":"echo","arguments":{"text":"p"},"_meta":{"progressToken":"tok-1"}}`,
	} {
		var answers [2]string
		for j, p := range []string{params, toSDK(params)} {
			c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, 100+i, p))
			answers[j] = normalized(c.recv())
		}
		if answers[0] != answers[1] {
			t.Errorf("params %s answered\n%s\nby the SDK's path\n%s", params, answers[0], answers[1])
		}
		if i == 0 && !strings.Contains(answers[0], `{ \"text\" : \"a  b\",  \"n\":  2 }`) {
			t.Errorf("the echo's arguments are not the bytes sent: %s", answers[0])
		}
	}
}

// A call waiting for an approval is cancelled by notifications/cancelled;
// a request reusing its id meanwhile is dropped; both as the SDK does.
func TestStdioCallsCancelAndReusedID(t *testing.T) {
	f := newFixture(t)
	// A short drain: the reused ids are never answered, which the end of
	// input would wait for (mcpstream counts each request read).
	c := rawStdioSession(t, server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: time.Minute, StdioDrain: 200 * time.Millisecond}))
	var answers [2][2]string
	for j, via := range []func(string) string{func(p string) string { return p }, toSDK} {
		// A target of its own: a pending approval of the same arguments
		// would be the call's too.
		id, target := 10+j, fmt.Sprintf("target-%d", j)
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, id, via(`{"name":"danger","arguments":{"target":"`+target+`"}}`)))
		for deadline := time.Now().Add(10 * time.Second); len(approvalsOf(t, f.st, "danger")) <= j; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("call %d never asked for an approval: %+v", j, approvalsOf(t, f.st, "danger"))
			}
		}
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, id, via(`{"name":"echo","arguments":{"text":"reused"}}`)))
		// The SDK drops a request reusing the id of one in flight
		// (jsonrpc2 takes it for a notification once it cleared its id):
		// the next answer is the ping's.
		c.send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
		answers[j][0] = normalized(c.recv())
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"test"}}`, id))
		answers[j][1] = strings.NewReplacer(fmt.Sprint(id), "ID", target, "TARGET").Replace(normalized(c.recv()))
	}
	if answers[0][0] != `{"jsonrpc":"2.0","id":"after","result":{}}` {
		t.Errorf("the reused id was answered, or the ping was not: %s", answers[0][0])
	}
	if !strings.Contains(answers[0][1], `"id":ID`) {
		t.Errorf("the cancelled call was answered %s", answers[0][1])
	}
	for k, what := range []string{"the reused id", "the cancelled call"} {
		if answers[0][k] != answers[1][k] {
			t.Errorf("%s was answered\n%s\nby the SDK's path\n%s", what, answers[0][k], answers[1][k])
		}
	}
	if f.dangers.Load() != 0 {
		t.Error("a cancelled call ran")
	}
}

// Calls served here run beside the reading (callConn.spawn): calls
// waiting for approvals block neither a call read after them, served here
// or by the SDK, nor a ping, nor their own cancellation.
func TestStdioCallsDoNotWaitForEachOther(t *testing.T) {
	f := newFixture(t)
	c := rawStdioSession(t, server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: time.Minute, StdioDrain: 200 * time.Millisecond}))
	for i := range 2 {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"danger","arguments":{"target":"wait-%d"}}}`, 20+i, i))
		for deadline := time.Now().Add(10 * time.Second); len(approvalsOf(t, f.st, "danger")) <= i; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("call %d never asked for an approval", i)
			}
		}
	}
	for _, tc := range []struct{ req, want string }{
		{`{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"echo","arguments":{"text":"own"}}}`, `"id":30,"result":`},
		{`{"jsonrpc":"2.0","id":31,"method":"tools/call","params":` + toSDK(`{"name":"echo","arguments":{"text":"sdk"}}`) + `}`, `"id":31,"result":`},
		{`{"jsonrpc":"2.0","id":32,"method":"ping"}`, `{"jsonrpc":"2.0","id":32,"result":{}}`},
	} {
		c.send(tc.req)
		if line := c.recv(); !strings.Contains(line, tc.want) {
			t.Fatalf("with two calls waiting, %s was answered %s", tc.req, line)
		}
	}
	// Cancelled in the reverse order: each answers as it is cancelled.
	for _, id := range []int{21, 20} {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"test"}}`, id))
		if line := c.recv(); !strings.Contains(line, fmt.Sprintf(`"id":%d,`, id)) {
			t.Fatalf("call %d cancelled, the next answer is %s", id, line)
		}
	}
	if f.echoes.Load() != 2 || f.dangers.Load() != 0 {
		t.Errorf("%d echoes and %d dangers ran, want 2 and 0", f.echoes.Load(), f.dangers.Load())
	}
}

// The end of input cancels a call served here still running, whose answer
// is still written, and ServeStdio returns (rawStdioSession's cleanup
// waits for it) once it has.
func TestStdioCallRunningAtTheEndOfInput(t *testing.T) {
	f := newFixture(t)
	c := rawStdioSession(t, server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: time.Minute, StdioDrain: 100 * time.Millisecond}))
	c.send(`{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"danger","arguments":{"target":"end"}}}`)
	for deadline := time.Now().Add(10 * time.Second); len(approvalsOf(t, f.st, "danger")) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call never asked for an approval")
		}
	}
	c.w.Close()
	if line := c.recv(); !strings.Contains(line, `"id":40,`) {
		t.Fatalf("the call running at the end was answered %s", line)
	}
	if f.dangers.Load() != 0 {
		t.Error("the call cancelled at the end ran")
	}
}

// What a stdio tools/call allocates in the server: without the SDK's two
// 32 KiB decodes of its params, well under the SDK path's.
func TestStdioCallAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("measures 2 x 200 calls")
	}
	f := newFixture(t)
	c := rawStdioSession(t, server.New(f.g, &server.Options{StdioCaller: "alice"}))
	perCall := func(params string) uint64 {
		const n = 200
		id := 0
		call := func() {
			id++
			c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, id, params))
			if line := c.recv(); !strings.Contains(line, `"echo":{"text":"a"}`) {
				t.Fatalf("answered %s", line)
			}
		}
		for range 20 {
			call()
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			call()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	own := perCall(`{"name":"echo","arguments":{"text":"a"}}`)
	sdk := perCall(toSDK(`{"name":"echo","arguments":{"text":"a"}}`))
	t.Logf("allocated per call: %d bytes, %d through the SDK's decoding", own, sdk)
	if own+48<<10 > sdk {
		t.Errorf("a stdio call allocates %d bytes, the SDK's path %d: not 48 KiB less", own, sdk)
	}
}

// A call over the stdio caller's rate is refused before any work, the
// same answer on both paths.
func TestStdioCallsRateLimited(t *testing.T) {
	f := newFixture(t)
	// A bucket of 3: initialize and notifications/initialized take two.
	c := rawStdioSession(t, server.New(f.g, &server.Options{StdioCaller: "alice", RateLimit: 1, RateBurst: 3}))
	var answers [2]string
	for j, p := range []string{`{"name":"echo","arguments":{"text":"r"}}`, toSDK(`{"name":"echo","arguments":{"text":"r"}}`)} {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, 50+j, p))
		answers[j] = strings.Replace(c.recv(), fmt.Sprint(50+j), "ID", 1)
	}
	// The first call may have the bucket's last token or not (a second
	// passed since initialize): either way the next is refused.
	c.send(`{"jsonrpc":"2.0","id":52,"method":"tools/call","params":{"name":"echo","arguments":{"text":"r"}}}`)
	own := strings.Replace(c.recv(), "52", "ID", 1)
	if !strings.Contains(own, `"code":-32029`) && !strings.Contains(own, "rate limited") {
		t.Fatalf("a call over the rate was answered %s", own)
	}
	if strings.Contains(answers[1], "rate limited") && own != answers[1] {
		t.Errorf("over the rate, answered\n%s\nby the SDK's path\n%s", own, answers[1])
	}
	if f.echoes.Load() > 2 {
		t.Errorf("%d echoes ran for a bucket of 3", f.echoes.Load())
	}
}

// BenchmarkStdioCall is a 2025-11-25 session's tools/call over stdio (the
// path of stdiocalls.go) from the raw line client, over in-memory pipes
// (io.Pipe) and over the system's (os-pipe: read as serve reads stdin),
// to a tool that answers as the Go echo upstream of internal/mcpbench
// does (text and structuredContent), on the in-memory store: the server's
// and the gateway's own work per call, without the upstream's process or
// the store's. It reports cpu-us/op, the process's CPU time per call.
//
//	go test ./server -run '^$' -bench StdioCall -benchtime 20000x -count 3
func BenchmarkStdioCall(b *testing.B) {
	b.Run("io-pipe", func(b *testing.B) { benchStdioCall(b, rawStdioSession) })
	b.Run("os-pipe", func(b *testing.B) { benchStdioCall(b, rawStdioSessionOS) })
}

func benchStdioCall(b *testing.B, session func(testing.TB, *server.Server) *rawStdio) {
	rules, err := policy.NewRules([]policy.Rule{{Caller: "bench", Allow: []string{"echo"}}})
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	err = g.Register(context.Background(), tool.Tool{Name: "echo", Description: "Echo the text.", InputSchema: json.RawMessage(echoSchema),
		Safety: tool.Safety{ReadOnly: true},
		Backend: tool.BackendFunc(func(context.Context, *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`{"content":[{"type":"text","text":"{\"text\":\"benchmark call\"}"}],"structuredContent":{"text":"benchmark call"}}`)}, nil
		})})
	if err != nil {
		b.Fatal(err)
	}
	c := session(b, server.New(g, &server.Options{StdioCaller: "bench"}))
	call := func(id int) {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"benchmark call"}}}`, id))
		if line := c.recv(); !strings.Contains(line, `"structuredContent":{"text":"benchmark call"}`) {
			b.Fatalf("answered %s", line)
		}
	}
	for i := range 20 {
		call(i)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		call(100 + i)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}
