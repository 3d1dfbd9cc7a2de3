package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/mcpstream"
	"github.com/agentbackplane/backplane/internal/procsup"
)

const (
	// terminateDelay is how long closing a stdio server waits for it to exit
	// on its own once its stdin is closed, before SIGTERM, then SIGKILL.
	terminateDelay = 2 * time.Second
	// stderrTail is how much of the end of a stdio server's stderr is kept
	// for the message that says why it stopped.
	stderrTail = 2 << 10
	// maxCapture bounds the bytes of one response kept for its raw view.
	maxCapture = 64 << 20
)

// link is one live connection to the server.
type link struct {
	sess    *sdk.ClientSession
	wire    *wire
	cmd     *exec.Cmd      // stdio only
	group   *procsup.Group // stdio only: cmd's process group
	cleanup func()         // stdio only: the sandbox's, once reaped
	stderr  *tailBuffer
	started time.Time
	once    sync.Once
	pinging atomic.Bool // a nudge's ping is in flight (nudge.go)
	// protocol is the revision agreed with the server: Protocol20260728
	// after server/discover, else what initialize negotiated.
	protocol string
	// logs says each call asks for every log message in its _meta
	// (2026-07-28, a server that declared logging: askForLogs).
	logs bool
	// direct is the stdio connection, on which tools/call requests are
	// written by the gateway itself (direct.go); nil over HTTP.
	direct *trackedConn

	// pages are the raw tools/list pages last read, by cursor: at
	// 2026-07-28 the SDK answers ListTools from its own cache while the
	// server's ttlMs lasts, and the bytes of a cached page never pass the
	// wire again (catalog.go's listTools).
	pagesMu sync.Mutex
	pages   map[string][]byte
}

// modern reports whether the link speaks 2026-07-28 or later.
func (l *link) modern() bool { return l.protocol >= Protocol20260728 }

func (l *link) keepPage(cursor string, raw []byte) {
	l.pagesMu.Lock()
	defer l.pagesMu.Unlock()
	if l.pages == nil {
		l.pages = map[string][]byte{}
	}
	l.pages[cursor] = raw
}

func (l *link) page(cursor string) ([]byte, bool) {
	l.pagesMu.Lock()
	defer l.pagesMu.Unlock()
	raw, ok := l.pages[cursor]
	return raw, ok
}

// close ends the session and, for a program, kills what is left of its
// process group.
func (l *link) close() {
	l.once.Do(func() {
		l.sess.Close()
		l.killGroup()
	})
}

func (l *link) killGroup() {
	if l.group != nil {
		// Once the leader is reaped this does nothing: the reap
		// (procStdin.Close) killed the group first, and its id may since
		// name someone else's group.
		l.group.Kill()
	}
}

// pid is the program's process id (0 over HTTP).
func (l *link) pid() int {
	if l.cmd == nil || l.cmd.Process == nil {
		return 0
	}
	return l.cmd.Process.Pid
}

// exitReason says why the connection ended, for the log and for calls.
func (l *link) exitReason(err error) string {
	msg := "connection closed"
	if err != nil && !errors.Is(err, io.EOF) {
		msg = err.Error()
	}
	if l.stderr != nil {
		if tail := l.stderr.lastLine(); tail != "" {
			msg += "; its stderr ends with: " + tail
		}
	}
	return msg
}

// dial starts the program or opens the HTTP connection, and initializes.
func (u *Upstream) dial(ctx context.Context) (*link, error) {
	w := newWire()
	w.seen = u.calls.seen
	l := &link{wire: w, started: time.Now()}
	var t sdk.Transport
	var tracked *trackedTransport // stdio's
	if u.srv.URL != "" {
		t = &sdk.StreamableClientTransport{
			Endpoint:   u.srv.URL,
			HTTPClient: &http.Client{Transport: &tapTransport{base: u.httpBase(), headers: u.srv.Headers, wire: w}},
			// A broken stream is retried a little by the SDK (it may carry an
			// answer); past that the session ends and supervise reconnects.
			MaxRetries: 1,
		}
	} else {
		// Its own process group (a signal to the gateway's group does not
		// reach it, and closing kills all it started) and the parent-death
		// signal: package procsup.
		cmd, cleanup, err := procsup.Command(u.srv.Command, u.srv.Dir, u.environ(), u.srv.Sandbox, false)
		if err != nil {
			return nil, fmt.Errorf("connecting over %s: %w", u.transport(), err)
		}
		l.stderr = &tailBuffer{max: stderrTail}
		cmd.Stderr = l.stderr
		cmd.WaitDelay = time.Second // a grandchild holding stderr must not block Wait
		l.cmd = cmd
		l.group = procsup.NewGroup(cmd)
		l.cleanup = cleanup
		tracked = &trackedTransport{inner: &procTransport{cmd: cmd, group: l.group, cleanup: cleanup, terminate: terminateDelay, onDropped: u.droppedLine}, wire: w}
		t = tracked
	}
	sess, err := u.client.Connect(ctx, t, &sdk.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		l.killGroup()
		if l.group != nil {
			go func() { l.group.Wait(); l.cleanup() }() // reap it (at once if it never started)
		} else if l.cleanup != nil {
			l.cleanup()
		}
		reason := err.Error()
		if l.stderr != nil {
			if tail := l.stderr.lastLine(); tail != "" {
				reason += "; its stderr ends with: " + tail
			}
		}
		return nil, fmt.Errorf("connecting over %s: %s", u.transport(), reason)
	}
	l.sess = sess
	if tracked != nil {
		l.direct = tracked.conn
	}
	if ir := sess.InitializeResult(); ir != nil {
		l.protocol = ir.ProtocolVersion
	}
	u.askForLogs(ctx, l)
	return l, nil
}

// droppedLine logs a line of the server's stdout that was dropped (see
// mcpstream.Options.OnDropped): at most once a second, with how many were
// dropped since, so that a server printing garbage cannot flood the log.
func (u *Upstream) droppedLine(err error) {
	n := u.droppedLines.Add(1)
	u.dropLog.Do(func() {
		u.droppedLines.Add(-n)
		u.log.Warn("upstream line dropped: not a message the gateway can read, and no request's id to fail with it",
			"error", err.Error(), "dropped", n)
	})
}

// environ is a program's environment: PATH, HOME and the allowed names,
// from the gateway's environment now. Never nil: a nil Env would pass the
// gateway's whole environment.
func (u *Upstream) environ() []string {
	env := []string{}
	seen := map[string]bool{}
	for _, name := range append([]string{"PATH", "HOME"}, u.srv.Env...) {
		if seen[name] {
			continue
		}
		seen[name] = true
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// --- the raw view of the exchanges ---

// The SDK decodes every answer into its own types: an inputSchema becomes
// map[string]any with float64 numbers (1.0 turns into 1, a large integer
// loses digits), a result's content becomes typed blocks that drop what
// they do not know. The gateway must register and return what the server
// sent (D20), so it watches the JSON-RPC messages themselves: a request
// made with an *exchange in its context is followed by id, and the raw
// result of its answer is kept. The same watch tells whether the request
// was written at all, which decides what a failed call proves.

// exchange follows one request of ours.
type exchange struct {
	method string

	mu     sync.Mutex
	id     jsonrpc.ID
	sent   bool // written in full to the server
	done   bool // answered
	result []byte
	rpcErr error
	// ready, for a request the gateway writes itself (direct.go), is
	// closed once the request is answered or its connection ends (lost).
	ready chan struct{}
	lost  error
}

func (e *exchange) markSent() {
	e.mu.Lock()
	e.sent = true
	e.mu.Unlock()
}

// markRefused undoes markSent for a request the server answered 401: the
// authentication in front of it refused it, so nothing ran (the request
// was written, perhaps twice with a retry, and still proves nothing ran).
func (e *exchange) markRefused() {
	e.mu.Lock()
	if !e.done {
		e.sent = false
	}
	e.mu.Unlock()
}

// state returns what is known: whether the request left, and its answer.
func (e *exchange) state() (sent, done bool, result []byte, rpcErr error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sent || e.done, e.done, e.result, e.rpcErr
}

type exchangeKey struct{}

func withExchange(ctx context.Context, e *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, e)
}

func exchangeFrom(ctx context.Context) *exchange {
	e, _ := ctx.Value(exchangeKey{}).(*exchange)
	return e
}

// wire holds one connection's watched requests, by JSON-RPC id.
type wire struct {
	mu      sync.Mutex
	pending map[jsonrpc.ID]*exchange
	// seen, when set, is told of each message read, in the order read,
	// before the SDK handles it.
	seen func(jsonrpc.Message)
	// closed is why the connection ended, once it has: a direct request
	// (direct.go) is not followed, or sent, after it.
	closed error
}

func newWire() *wire { return &wire{pending: map[jsonrpc.ID]*exchange{}} }

// track starts following msg when it is the request of ctx's exchange.
func (w *wire) track(ctx context.Context, msg jsonrpc.Message) *exchange {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return nil
	}
	e := exchangeFrom(ctx)
	if e == nil || e.method != req.Method {
		return nil
	}
	e.mu.Lock()
	e.id = req.ID
	e.mu.Unlock()
	w.mu.Lock()
	w.pending[req.ID] = e
	w.mu.Unlock()
	return e
}

// settle records the answer msg, when it answers a followed request, and
// returns that request's exchange. owned says msg's bytes are the
// message's own (a fresh buffer per message), not a reused buffer's, so
// the result need not be copied.
func (w *wire) settle(msg jsonrpc.Message, owned bool) *exchange {
	if w.seen != nil {
		w.seen(msg)
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return nil
	}
	w.mu.Lock()
	e := w.pending[resp.ID]
	delete(w.pending, resp.ID)
	w.mu.Unlock()
	if e == nil {
		return nil
	}
	e.mu.Lock()
	e.done = true
	e.result = resp.Result
	if !owned {
		e.result = bytes.Clone(resp.Result)
	}
	e.rpcErr = resp.Error
	if e.ready != nil {
		close(e.ready)
	}
	e.mu.Unlock()
	return e
}

// errTakenRaw stands, for the SDK, in the place of a tools/call result the
// gateway reads from the wire itself (see trackedConn.Read).
var errTakenRaw = errors.New("the result was taken from the wire")

// forget stops following e (its caller is done with it).
func (w *wire) forget(e *exchange) {
	e.mu.Lock()
	id := e.id
	e.mu.Unlock()
	if !id.IsValid() {
		return
	}
	w.mu.Lock()
	if w.pending[id] == e {
		delete(w.pending, id)
	}
	w.mu.Unlock()
}

// trackedTransport watches a stdio connection's messages. (Wrapping the
// connection hides its unexported methods from the SDK; the stdio
// connection has none the client uses. The HTTP one does, so HTTP is
// watched at the HTTP layer instead, by tapTransport.)
type trackedTransport struct {
	inner sdk.Transport
	wire  *wire
	conn  *trackedConn // once connected
}

func (t *trackedTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	t.conn = &trackedConn{Connection: c, wire: t.wire}
	return t.conn, nil
}

type trackedConn struct {
	sdk.Connection
	wire *wire
}

func (c *trackedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	e := c.wire.track(ctx, msg)
	err := c.Connection.Write(ctx, msg)
	if e != nil && err == nil {
		// A failed write may have left part of a line in the pipe; a
		// server cannot act on part of a line.
		e.markSent()
	}
	return err
}

func (c *trackedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			// A read error ends the connection (package mcpstream): the
			// direct requests waiting are told.
			c.wire.end(fmt.Errorf("%w: %v", sdk.ErrConnectionClosed, err))
			return msg, err
		}
		e := c.wire.settle(msg, true)
		if e != nil && e.ready != nil {
			// The answer to a request the gateway wrote itself (direct.go):
			// the SDK never sent it, and is not told.
			continue
		}
		if e != nil && e.method == "tools/call" {
			if resp := msg.(*jsonrpc.Response); resp.Error == nil {
				// The gateway returns the raw result (toolBackend.Invoke), so
				// the SDK need not decode it a second time, into types the
				// gateway would not read: it is told the call ended, with an
				// error that Invoke knows and does not report.
				msg = &jsonrpc.Response{ID: resp.ID, Error: errTakenRaw, Extra: resp.Extra}
			}
		}
		return msg, nil
	}
}

// tapTransport is the HTTP client's transport for a URL server: it adds the
// configured headers, follows the watched requests (httptrace says when a
// request was written in full) and reads the JSON-RPC messages of every
// answer, JSON or server-sent events, as the SDK consumes them.
type tapTransport struct {
	base    http.RoundTripper
	headers map[string]string
	wire    *wire
	polls   polls
}

func (t *tapTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		// The protocol's own headers (Content-Type, Accept, Mcp-Session-Id,
		// Mcp-Protocol-Version) are the SDK's to set.
		if req.Header.Get(k) == "" {
			req.Header.Set(k, v)
		}
	}
	resumed := ""
	if req.Method == http.MethodGet && req.Header.Get("Last-Event-ID") != "" {
		resumed = t.polls.real(req.Header.Get("Last-Event-ID"))
		req.Header.Set("Last-Event-ID", resumed)
	}
	setTraceHeaders(req)
	var tracked *exchange
	if req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			data, _ := io.ReadAll(io.LimitReader(body, maxCapture))
			body.Close()
			if msg, err := mcpstream.DecodeMessage(data); err == nil {
				if e := t.wire.track(req.Context(), msg); e != nil {
					tracked = e
					trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
						if info.Err == nil {
							e.markSent()
						}
					}}
					req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
				}
			}
		}
	}
	resp, err := t.base.RoundTrip(req)
	var oauthErr *OAuthError
	if tracked != nil && (err == nil && resp.StatusCode == http.StatusUnauthorized || errors.As(err, &oauthErr)) {
		// Refused by the server's authentication, or no token to send
		// (none at all, or none to replace the one a 401 refused): the
		// request did not run.
		tracked.markRefused()
	}
	if err != nil {
		return nil, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		resp.Body = &jsonTap{rc: resp.Body, wire: t.wire}
	case "text/event-stream":
		if resumed != "" && resp.StatusCode == http.StatusOK {
			resp.Body = t.polls.prime(resp.Body, resumed)
		}
		resp.Body = newSSETap(resp.Body, t.wire)
	}
	return resp, nil
}

// polls resumes the SSE stream of a call that a 2025-11-25 server closes
// again and again while the call works (SEP-1699 polling: each close
// carries a retry hint, and the answer comes on a later resumption).
//
// The SDK's client resumes a closed stream with a GET carrying
// Last-Event-ID, but it forgets that id when the resumed stream closes
// before any event with an id (the event stream format keeps it: the last
// event ID persists across reconnections), and then fails the call
// ("request terminated without response"); and it fails the connection
// when a resumed stream brings no new id twice (MaxRetries). So each
// resumed stream is made to begin with an event of an id alone, the
// resumed id with a count appended: the SDK keeps it, sees progress, and
// sends it back on the next resumption, where it is turned back into the
// server's own id. A poll is paced by the server's retry hint (1s without
// one) and bounded by the call's deadline.
type polls struct {
	mu   sync.Mutex
	n    uint64
	byID map[string]string // our id -> the server's
}

// maxPolls bounds the ids kept (a connection's resumptions in flight).
const maxPolls = 4096

// real is the server's id for id: id itself unless it is one of ours.
func (p *polls) real(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.byID[id]; ok {
		delete(p.byID, id)
		return r
	}
	return id
}

// prime returns body with an event of an id alone put before it: an id
// standing for resumed, the server's.
func (p *polls) prime(body io.ReadCloser, resumed string) io.ReadCloser {
	p.mu.Lock()
	if p.byID == nil || len(p.byID) >= maxPolls {
		p.byID = map[string]string{}
	}
	p.n++
	ours := resumed + " (backplane poll " + strconv.FormatUint(p.n, 10) + ")"
	p.byID[ours] = resumed
	p.mu.Unlock()
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(strings.NewReader("id: "+ours+"\n\n"), body), body}
}

// jsonTap keeps a JSON answer's bytes and reads its message at EOF.
type jsonTap struct {
	rc   io.ReadCloser
	wire *wire
	buf  bytes.Buffer
	over bool
}

func (j *jsonTap) Read(p []byte) (int, error) {
	n, err := j.rc.Read(p)
	if !j.over {
		if j.buf.Len()+n > maxCapture {
			j.over = true
			j.buf = bytes.Buffer{}
		} else {
			j.buf.Write(p[:n])
		}
	}
	if errors.Is(err, io.EOF) && !j.over && j.buf.Len() > 0 {
		if msg, derr := mcpstream.DecodeMessage(bytes.TrimSpace(j.buf.Bytes())); derr == nil {
			j.wire.settle(msg, false)
		}
		j.over = true // once
	}
	return n, err
}

func (j *jsonTap) Close() error { return j.rc.Close() }

// sseTap reads the events of a server-sent event stream as they pass. It
// parses in Read, before returning the bytes: an answer is settled before
// the SDK can hand it to the caller.
type sseTap struct {
	rc io.ReadCloser
	p  sseParser
}

func newSSETap(rc io.ReadCloser, w *wire) *sseTap {
	return &sseTap{rc: rc, p: sseParser{fn: func(data []byte) {
		if msg, err := mcpstream.DecodeMessage(data); err == nil {
			w.settle(msg, false)
		}
	}}}
}

func (s *sseTap) Read(b []byte) (int, error) {
	n, err := s.rc.Read(b)
	s.p.feed(b[:n])
	return n, err
}

func (s *sseTap) Close() error { return s.rc.Close() }

// sseParser is an incremental parser of the event stream format: fn gets
// the data of each event (its data lines joined by "\n"); lines end with
// "\r\n", "\n" or "\r"; an event larger than maxCapture is dropped, as is
// one the stream ends in the middle of.
type sseParser struct {
	fn        func(data []byte)
	line      []byte
	data      []byte
	has       bool // a data line was seen in this event
	over      bool // this line or event is too large
	pendingCR bool // the last byte was '\r': a '\n' next belongs to it
}

func (p *sseParser) feed(b []byte) {
	for len(b) > 0 {
		if p.pendingCR {
			p.pendingCR = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			p.add(b)
			return
		}
		p.add(b[:i])
		p.pendingCR = b[i] == '\r'
		b = b[i+1:]
		p.endLine()
	}
}

func (p *sseParser) add(b []byte) {
	if len(p.line)+len(b) > maxCapture {
		p.over = true
		p.line = p.line[:0]
		return
	}
	p.line = append(p.line, b...)
}

func (p *sseParser) endLine() {
	line := p.line
	p.line = p.line[:0]
	if len(line) == 0 && !p.over {
		if p.has {
			p.fn(p.data)
		}
		p.data, p.has = p.data[:0], false
		return
	}
	if len(line) == 0 { // the end of an oversized event
		p.over = false
		p.data, p.has = p.data[:0], false
		return
	}
	if p.over {
		return
	}
	field, value, _ := bytes.Cut(line, []byte(":"))
	if string(field) != "data" {
		return // event, id, retry, comments
	}
	value = bytes.TrimPrefix(value, []byte(" "))
	if len(p.data)+len(value)+1 > maxCapture {
		p.over = true
		return
	}
	if p.has {
		p.data = append(p.data, '\n')
	}
	p.data = append(p.data, value...)
	p.has = true
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// lastLine is the last non-empty line written, trimmed.
func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
