package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
)

// cutter is a client transport that breaks the event stream of the first
// tools/call right after its first event, as a dropped connection would,
// and counts the reconnections that resume with Last-Event-ID.
type cutter struct {
	base    http.RoundTripper
	token   string
	cut     atomic.Bool
	resumed atomic.Int64
}

func (c *cutter) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+c.token)
	if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
		c.resumed.Add(1)
	}
	isCall := false
	if r.Method == http.MethodPost && r.GetBody != nil {
		if b, err := r.GetBody(); err == nil {
			data, _ := io.ReadAll(b)
			isCall = bytes.Contains(data, []byte(`"tools/call"`))
		}
	}
	resp, err := c.base.RoundTrip(r)
	if err != nil || !isCall || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	if c.cut.CompareAndSwap(false, true) {
		resp.Body = &cutAfterFirstEvent{rc: resp.Body}
	}
	return resp, nil
}

// cutAfterFirstEvent passes the stream up to the end of its first event
// that carries data (a message: the SDK's priming event, an id alone,
// comes before the request is even handled, so cutting after it would
// race the call's own progress), then fails as a broken connection does.
type cutAfterFirstEvent struct {
	rc      io.ReadCloser
	seen    []byte
	scanned int // how much of seen is whole events without data
	done    bool
}

func (c *cutAfterFirstEvent) Read(p []byte) (int, error) {
	if c.done {
		c.rc.Close()
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.rc.Read(p)
	c.seen = append(c.seen, p[:n]...)
	for {
		i := bytes.Index(c.seen[c.scanned:], []byte("\n\n"))
		if i < 0 {
			return n, err
		}
		end := c.scanned + i + 2
		event := c.seen[c.scanned:end]
		c.scanned = end
		if bytes.HasPrefix(event, []byte("data:")) || bytes.Contains(event, []byte("\ndata:")) {
			keep := n - (len(c.seen) - end)
			c.done = true
			return keep, nil
		}
	}
}

func (c *cutAfterFirstEvent) Close() error { return c.rc.Close() }

// TestResumeAfterDroppedStream: a call waits for an approval over HTTP;
// its stream drops after the first progress event; the client reconnects
// with Last-Event-ID, the operator approves meanwhile, and the answer
// reaches the client on the resumed stream.
func TestResumeAfterDroppedStream(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}, ApprovalWait: 30 * time.Second})
	hs := httpServer(t, s)
	cut := &cutter{base: http.DefaultTransport, token: "tok-a"}
	var mu sync.Mutex
	var steps int
	c := mcp.NewClient(&mcp.Implementation{Name: "resumer", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			steps++
			mu.Unlock()
		},
	})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: hs.URL + server.PathMCP, HTTPClient: &http.Client{Transport: cut}, MaxRetries: 5,
	}, sessionEra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"target": "prod-db"}}
		p.SetProgressToken("tok-r")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, p)
		done <- outcome{res, err}
	}()
	waitFor(t, "the client to resume with Last-Event-ID", func() bool { return cut.resumed.Load() > 0 })
	aprs := approvalsOf(t, f.st, "danger")
	if len(aprs) != 1 || aprs[0].Status != store.ApprovalPending {
		t.Fatalf("approvals %+v", aprs)
	}
	if err := f.st.DecideApproval(context.Background(), aprs[0].ID, store.ApprovalDecision{Approve: true, By: "carol", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the call did not return")
	}
	if o.err != nil || o.res.IsError {
		t.Fatalf("after resuming: %v %v", o.err, o.res)
	}
	if !cut.cut.Load() || f.dangers.Load() != 1 {
		t.Errorf("cut %v, invoked %d times", cut.cut.Load(), f.dangers.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if steps == 0 {
		t.Error("no progress event before the cut")
	}
}

// gone is a client transport with no standalone stream (GET answered 405)
// whose connection is lost for good once the first tools/call stream has
// carried one event.
type gone struct {
	cutter
	lost atomic.Bool
}

func (g *gone) RoundTrip(r *http.Request) (*http.Response, error) {
	if g.lost.Load() {
		return nil, errors.New("the network is gone")
	}
	if r.Method == http.MethodGet {
		return &http.Response{StatusCode: http.StatusMethodNotAllowed, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
	}
	resp, err := g.cutter.RoundTrip(r)
	if err == nil && g.cut.Load() {
		g.lost.Store(true)
	}
	return resp, err
}

// TestDroppedClientThatNeverReturnsIsCancelled: past ResumeGrace without
// its session coming back, a call waiting for an approval is cancelled:
// approving the request afterwards runs nothing.
func TestDroppedClientThatNeverReturnsIsCancelled(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}, ApprovalWait: 30 * time.Second, ResumeGrace: 200 * time.Millisecond})
	hs := httpServer(t, s)
	tr := &gone{cutter: cutter{base: http.DefaultTransport, token: "tok-a"}}
	c := mcp.NewClient(&mcp.Implementation{Name: "leaver", Version: "v0"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: hs.URL + server.PathMCP, HTTPClient: &http.Client{Transport: tr}, MaxRetries: 0,
	}, sessionEra)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		p := &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"target": "prod-db"}}
		p.SetProgressToken("tok-g")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cs.CallTool(ctx, p)
	}()
	waitFor(t, "the stream to be cut", tr.cut.Load)
	// The call withdraws (the gateway says so in its error); the server
	// counts no call in flight any more.
	waitFor(t, "the call to be cancelled", func() bool { return len(approvalsOf(t, f.st, "danger")) == 1 && server.ActiveCalls(s) == 0 })
	aprs := approvalsOf(t, f.st, "danger")
	if err := f.st.DecideApproval(context.Background(), aprs[0].ID, store.ApprovalDecision{Approve: true, By: "carol", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if f.dangers.Load() != 0 {
		t.Errorf("the tool ran %d times for a client that was gone", f.dangers.Load())
	}
}

// TestSessionCountersForgotten: the per-session request counter kept for
// resumption goes when its session ends, and none is kept for a session
// id the server does not know.
func TestSessionCountersForgotten(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}})
	hs := httpServer(t, s)
	cs, err := connectHTTP(t, hs, "tok-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	call(t, cs, "echo", map[string]any{"x": 1})
	if n := server.LiveCounters(s); n != 1 {
		t.Fatalf("an open session: %d counters, want 1", n)
	}
	// A request naming a session that does not exist.
	req, _ := http.NewRequest(http.MethodPost, hs.URL+server.PathMCP, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer tok-a")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", "no-such-session")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := server.LiveCounters(s); n != 1 {
		t.Errorf("after a request of an unknown session: %d counters, want 1", n)
	}
	cs.Close() // DELETE: the session ends
	deadline := time.Now().Add(10 * time.Second)
	for server.LiveCounters(s) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the ended session's counter is still kept (%d)", server.LiveCounters(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSessionCounterForgottenAtIdleTimeout: a session closed by the server
// (idle), not by its client, leaves no counter either.
func TestSessionCounterForgottenAtIdleTimeout(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}, SessionIdleTimeout: 300 * time.Millisecond})
	hs := httpServer(t, s)
	// A raw session: no standalone stream held open, so it goes idle.
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(session, body string) string {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+server.PathMCP, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-a")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("Mcp-Session-Id")
	}
	id := post("", init)
	if id == "" {
		t.Fatal("no session id")
	}
	post(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	post(id, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if n := server.LiveCounters(s); n != 1 {
		t.Fatalf("an open session: %d counters, want 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for server.LiveCounters(s) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the idle session's counter is still kept (%d)", server.LiveCounters(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// away is a client transport whose first tools/call stream breaks after
// its first event and whose resumptions (GET with Last-Event-ID) never
// reach the server (they hang until given up), while its standalone GET
// stream stays open: a client that has abandoned its call but not its
// session.
type away struct {
	cutter
}

func (a *away) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return a.cutter.RoundTrip(r)
}

// TestStandaloneStreamIsNoResumption: a session's standalone GET stream
// (open from before the drop, without Last-Event-ID) does not count as
// the client coming back for a call whose request dropped; an approval
// decided while the client is away is not consumed by that call, which
// withdraws at the end of the grace. (Finding 17 of issue 22: before, any
// request of the session in progress counted as a resumption, and a call
// approved within the grace ran for a client that had gone.)
func TestStandaloneStreamIsNoResumption(t *testing.T) {
	f := newFixture(t)
	// The grace only has to outlast the call's way to its approval step;
	// the withdrawal is waited for below.
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}, ApprovalWait: 30 * time.Second, ResumeGrace: 5 * time.Second})
	hs := httpServer(t, s)
	tr := &away{cutter: cutter{base: http.DefaultTransport, token: "tok-a"}}
	c := mcp.NewClient(&mcp.Implementation{Name: "abandoner", Version: "v0"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: hs.URL + server.PathMCP, HTTPClient: &http.Client{Transport: tr}, MaxRetries: 1,
	}, sessionEra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	// The abandoned call's client side hangs in its reconnection: ended
	// before the session is closed (cleanups run last first).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	go func() {
		p := &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"target": "prod-db"}}
		p.SetProgressToken("tok-s")
		cs.CallTool(ctx, p)
	}()
	waitFor(t, "the server to see the call's request end", func() bool { return server.Drops(s) > 0 })
	// The stream is cut after its first event, which may come before the
	// call reaches its approval step (a loaded machine): the call goes on
	// within the grace and opens its request then.
	var aprs []store.Approval
	waitFor(t, "the call's approval request", func() bool {
		aprs = approvalsOf(t, f.st, "danger")
		return len(aprs) > 0
	})
	if len(aprs) != 1 || aprs[0].Status != store.ApprovalPending {
		t.Fatalf("approvals %+v", aprs)
	}
	if err := f.st.DecideApproval(context.Background(), aprs[0].ID, store.ApprovalDecision{Approve: true, By: "carol", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the call to withdraw", func() bool { return server.ActiveCalls(s) == 0 })
	if n := f.dangers.Load(); n != 0 {
		t.Errorf("the tool ran %d times for a client that had abandoned the call", n)
	}
	if a := approvalsOf(t, f.st, "danger"); len(a) != 1 || a[0].ConsumedBy != "" {
		t.Errorf("the approval after the abandoned call: %+v", a)
	}
	// The standalone stream is still there (the session is alive): a new
	// call of the same session consumes the approval.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"target": "prod-db"}})
	if err != nil || res.IsError || f.dangers.Load() != 1 {
		t.Errorf("the retry: %v %+v, ran %d times", err, res, f.dangers.Load())
	}
}

// TestResumeBeforeTheServerSeesTheDrop: a client resumes a call's stream
// (Last-Event-ID) while the connection the call began on is still open, as
// when the client saw the drop before the server did. The SDK refuses such
// a resumption (409: the stream is held) and the TypeScript SDK's client
// does not retry it, so the server waits for the old connection to go
// instead: the resumption gets the stream, carries the answer once the
// call is approved, and the call runs once.
func TestResumeBeforeTheServerSeesTheDrop(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}, ApprovalWait: 30 * time.Second})
	hs := httpServer(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(client *http.Client, method, session, body string, hdr map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, hs.URL+server.PathMCP, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok-a")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := send(http.DefaultClient, http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`, nil)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, session)
	}
	resp = send(http.DefaultClient, http.MethodPost, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	resp.Body.Close()

	// The call, on a connection of its own, read up to its first progress
	// event; the connection stays open for now.
	first := &http.Client{Transport: &http.Transport{}}
	call := send(first, http.MethodPost, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"danger","arguments":{"target":"prod-db"},"_meta":{"progressToken":"p1"}}}`, nil)
	if !strings.HasPrefix(call.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("the call answered %s %s", call.Status, call.Header.Get("Content-Type"))
	}
	progress, _ := firstEvent(bufio.NewScanner(call.Body), "notifications/progress")
	lastID := progress.id
	if lastID == "" {
		t.Fatal("no progress event with an id before the drop")
	}

	// The resumption, while the first connection is still open.
	type answer struct {
		resp *http.Response
		at   time.Time
	}
	resumed := make(chan answer, 1)
	go func() {
		r := send(&http.Client{Transport: &http.Transport{}}, http.MethodGet, session, "", map[string]string{"Last-Event-ID": lastID, "Accept": "text/event-stream"})
		resumed <- answer{r, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	dropped := time.Now()
	call.Body.Close() // the connection goes
	a := <-resumed
	defer a.resp.Body.Close()
	if a.resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(a.resp.Body)
		t.Fatalf("the resumption was refused: %s %s", a.resp.Status, b)
	}
	if a.at.Before(dropped) {
		t.Errorf("the resumption was answered before the stream it resumes was let go")
	}
	aprs := approvalsOf(t, f.st, "danger")
	if len(aprs) != 1 || aprs[0].Status != store.ApprovalPending {
		t.Fatalf("approvals %+v", aprs)
	}
	if err := f.st.DecideApproval(ctx, aprs[0].ID, store.ApprovalDecision{Approve: true, By: "carol", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	answered, _ := firstEvent(bufio.NewScanner(a.resp.Body), `"id":2`)
	result := answered.data
	if !strings.Contains(result, `"result"`) || strings.Contains(result, `"isError":true`) {
		t.Fatalf("the resumed stream's answer: %q", result)
	}
	if n := f.dangers.Load(); n != 1 {
		t.Errorf("danger ran %d times, want once", n)
	}
}

// sseEvent is one server-sent event: its id and its data.
type sseEvent struct{ id, data string }

// firstEvent reads events from sc until one whose data contains want;
// false when the stream ends first.
func firstEvent(sc *bufio.Scanner, want string) (sseEvent, bool) {
	var e sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if strings.Contains(e.data, want) {
				return e, true
			}
			e = sseEvent{}
		case strings.HasPrefix(line, "id:"):
			e.id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			e.data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		}
	}
	return sseEvent{}, false
}
