package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/internal/mcpstream"
)

// The stdio session's tools/call (issue 27). The SDK's ServerSession
// decodes every request's params twice through a JSON decoder that
// allocates 32 KiB per decode (for its _meta, then into the typed
// params): two thirds of what the gateway allocated per call over stdio,
// with no public way around it. A stdio session's connection is
// Backplane's own (package mcpstream), so it is wrapped here: a tools/call
// of an initialized 2025-11-25 (or older) session whose params this
// reader takes exactly as the SDK would is served by the same code as the
// SDK's path (the stdio rate limit, then toolsCall: callTool and the task
// answer), with the session itself for everything the call sends the
// client (progress, log messages, elicitation, sampling, roots), and its
// answer is written as the SDK's connection writes one. Every other
// message, and a tools/call this reader leaves alone (a 2026-07-28 _meta,
// any _meta member other than the few callTool reads, a number as progress
// token, a member or name the SDK might read otherwise, params too large or
// deep for the strict reader), goes to the SDK untouched. Falling back
// never changes an answer; it only costs the SDK's decoding.
//
// What the SDK's connection does for a request, done here too for the
// calls taken: a notifications/cancelled naming one cancels it (and still
// reaches the SDK, which cancels its own of that id, if any); a request
// whose id is one of these calls' still running is dropped, as the SDK
// drops a reused id (and a tools/call reusing the id of one of the SDK's
// own goes to the SDK, which drops it); when reading ends the calls
// still running are cancelled, and the end reaches the SDK once they
// returned (the SDK cancels its handlers and waits for them before it
// closes the stream); once the connection is closing, or the server is
// shutting down, every call goes to the SDK, which refuses or cancels it
// as before.

// callTransport wraps a stdio session's transport (see above).
type callTransport struct {
	mcp.Transport
	s    *Server
	conn *callConn // set by Connect
}

// Connect implements mcp.Transport.
func (t *callTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	t.conn = &callConn{Connection: c, s: t.s, base: context.WithoutCancel(ctx),
		calls: map[jsonrpc.ID]context.CancelFunc{}, sdkCalls: map[jsonrpc.ID]bool{},
		idle: make(chan func()), done: make(chan struct{})}
	return t.conn, nil
}

// callConn is a stdio session's connection, serving the tools/call it
// can (see above).
type callConn struct {
	mcp.Connection
	s *Server
	// session is the SDK's session of this connection, set once Connect
	// returned it: until then every message goes to the SDK.
	session atomic.Pointer[mcp.ServerSession]
	// base is the calls' context: the SDK's connection's, without its
	// cancellation (as the SDK's own handlers get it).
	base context.Context

	// idle hands a call to a worker waiting for one (serve's workers,
	// below); done ends the workers once reading ended.
	idle     chan func()
	done     chan struct{}
	doneOnce sync.Once

	mu       sync.Mutex
	calls    map[jsonrpc.ID]context.CancelFunc // the calls served here, running
	sdkCalls map[jsonrpc.ID]bool               // the ids of the calls handed to the SDK, not answered yet
	closing  bool                              // Close was called
	running  sync.WaitGroup                    // the calls served here
}

// Read implements mcp.Connection: it hands the SDK every message but the
// tools/call served here.
func (c *callConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			// As the SDK's connection does once reading ends (its calls
			// cannot be cancelled by the client any more), and holding
			// the end back until they returned: the SDK closes the stream
			// once its own work is done, which does not count these.
			c.cancelAll()
			c.running.Wait()
			c.doneOnce.Do(func() { close(c.done) })
			return msg, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			return msg, nil
		}
		if !req.IsCall() {
			if req.Method == "notifications/cancelled" {
				c.cancelled(req.Params)
			}
			return msg, nil
		}
		c.mu.Lock()
		_, inUse := c.calls[req.ID]
		c.mu.Unlock()
		if inUse {
			// The SDK does not know the calls served here, and drops a
			// request reusing the id of one of its own in flight (it
			// clears the id, and then takes the request for a
			// notification): so is this one.
			continue
		}
		if req.Method != "tools/call" || !c.serve(req) {
			c.mu.Lock()
			c.sdkCalls[req.ID] = true
			c.mu.Unlock()
			return msg, nil
		}
	}
}

// Write implements mcp.Connection: an answer of the SDK's frees its id.
func (c *callConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		// Before the write: the client may reuse the id once it has the
		// answer.
		c.mu.Lock()
		delete(c.sdkCalls, resp.ID)
		c.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}

// cancelled cancels the call served here that a notifications/cancelled
// names, read as the SDK reads its requestId.
func (c *callConn) cancelled(params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	c.mu.Lock()
	cancel := c.calls[id]
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// cancelAll cancels every call served here still running.
func (c *callConn) cancelAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cancel := range c.calls {
		cancel()
	}
}

// Close implements mcp.Connection. It does not wait for the calls served
// here: the SDK calls it holding its connection's lock, which a call
// sending anything to the client would wait for. (The SDK closes a
// session once its work is done: at the end of input, Read held that end
// back until these calls returned; Server.Shutdown drains the calls before
// it closes the sessions.) The calls still running are cancelled when the
// closed stream ends Read.
func (c *callConn) Close() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	return c.Connection.Close()
}

// serve starts the call req when it is one served here (see above), and
// reports whether it did.
func (c *callConn) serve(req *jsonrpc.Request) bool {
	ss := c.session.Load()
	if ss == nil || ss.InitializeParams() == nil || c.s.stop.Err() != nil {
		return false // not initialized (the SDK refuses it), or shutting down
	}
	p, ok := stdioCallParams(req.Params)
	if !ok {
		return false
	}
	ctx, cancel := context.WithCancel(c.base)
	c.mu.Lock()
	if c.closing || c.sdkCalls[req.ID] {
		// Closing: the SDK refuses new calls. An id of one of the SDK's
		// calls: the SDK drops it as reused.
		c.mu.Unlock()
		cancel()
		return false
	}
	c.calls[req.ID] = cancel
	c.running.Add(1)
	c.mu.Unlock()
	c.spawn(func() {
		defer c.running.Done()
		raw := &rawAnswer{}
		res, err := c.s.stdioCall(ctx, &mcp.CallToolRequest{Session: ss, Params: p}, raw)
		resp := &jsonrpc.Response{ID: req.ID, Error: err}
		var encErr error
		switch {
		case err != nil:
		case raw.out != nil:
			resp.Result = raw.out // written as the SDK encodes it (appendSessionResult)
		default:
			resp.Result, encErr = encodeResult(res)
		}
		// The id is free again once answered: forgotten before the
		// answer is written, as the SDK does.
		c.mu.Lock()
		delete(c.calls, req.ID)
		c.mu.Unlock()
		cancel()
		if encErr != nil {
			// The SDK's connection writes no answer for a result it
			// cannot encode, and reports it as an internal error.
			c.s.sdkLog.Error("jsonrpc2 internal error", "error", fmt.Errorf("a malformed result for %q: %w", req.Method, encErr))
			return
		}
		// Written whatever became of ctx, as the SDK writes an answer.
		c.Connection.Write(c.base, resp)
	})
	return true
}

// workerIdle is how long a worker waits for another call before it ends.
const workerIdle = 10 * time.Second

// spawn runs call on a worker of the connection: one waiting for work, else
// a new one. Why not a goroutine per call, as the SDK starts: a call runs
// the whole pipeline, whose depth grows a new goroutine's stack several
// times (runtime.newstack and copystack were 8% of the CPU of a stdio
// call); a worker keeps the stack it grew for the next call.
func (c *callConn) spawn(call func()) {
	select {
	case c.idle <- call:
	default:
		go c.work(call)
	}
}

// work runs call, then the calls handed to it while it waits, until it
// waited workerIdle for none or reading ended.
func (c *callConn) work(call func()) {
	timer := time.NewTimer(workerIdle)
	defer timer.Stop()
	for {
		call()
		timer.Reset(workerIdle)
		select {
		case call = <-c.idle:
		case <-timer.C:
			return
		case <-c.done:
			return
		}
	}
}

// stdioCall is what the stdio server's receiving middleware does with a
// tools/call (rateLimitStdio, then middleware's tools/call), for a call
// served by callConn; raw takes a successful result as bytes where it can
// (callTool).
func (s *Server) stdioCall(ctx context.Context, req *mcp.CallToolRequest, raw *rawAnswer) (mcp.Result, error) {
	caller := s.opts.StdioCaller
	if caller == "" {
		return nil, ErrNoStdioCaller
	}
	if ok, retry := s.rates.allow(caller); !ok {
		s.limited(caller, limitRate, "tools/call", s.describeRate())
		return nil, s.rateLimitError(caller, retry)
	}
	return s.toolsCall(ctx, req, caller, raw)
}

// encodeResult is the JSON of a call's result as the SDK's connection
// encodes one (encoding/json without HTML escaping). A tool result is its
// own MarshalJSON's bytes: what the encoder would write for it, compacted
// without escaping, which leaves json.Marshal's compact output as it is.
func encodeResult(res mcp.Result) (json.RawMessage, error) {
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil {
		return r.MarshalJSON()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// stdioMetaStrings are the _meta members a session's tools/call may carry
// to be served by callConn, each a string: those callTool reads.
var stdioMetaStrings = map[string]bool{
	"progressToken": true, MetaTraceParent: true, MetaTraceState: true, MetaIdempotencyKey: true,
}

// stdioCallParams reads a session's tools/call params as the SDK reads
// them into CallToolParamsRaw, or false where it might read them
// otherwise: only name (a string), arguments (an object, its exact bytes)
// and _meta (the strings of stdioMetaStrings), each at most once.
func stdioCallParams(raw json.RawMessage) (*mcp.CallToolParamsRaw, bool) {
	members, err := jsonstrict.Members(raw, nil)
	if err != nil {
		return nil, false
	}
	p := &mcp.CallToolParamsRaw{}
	var name, args, meta, ok bool
	for _, m := range members {
		switch {
		case m.Name == "name" && !name:
			n, ok := plainString(m.Raw)
			if !ok {
				return nil, false
			}
			p.Name, name = n, true
		case m.Name == "arguments" && !args:
			if len(m.Raw) == 0 || m.Raw[0] != '{' {
				return nil, false // null, or not an object: the SDK's to answer
			}
			p.Arguments, args = m.Raw, true
		case m.Name == "_meta" && !meta:
			if p.Meta, ok = stdioMeta(m.Raw); !ok {
				return nil, false
			}
			meta = true
		default:
			return nil, false
		}
	}
	return p, name
}

// stdioMeta reads a session's tools/call _meta for stdioCallParams.
func stdioMeta(raw []byte) (mcp.Meta, bool) {
	members, err := jsonstrict.Members(raw, nil)
	if err != nil {
		return nil, false
	}
	meta := make(mcp.Meta, len(members))
	for _, m := range members {
		if _, dup := meta[m.Name]; dup || !stdioMetaStrings[m.Name] {
			return nil, false
		}
		v, ok := plainString(m.Raw)
		if !ok {
			return nil, false
		}
		meta[m.Name] = v
	}
	return meta, true
}

// stdioTransport is t for a stdio session: wrapped by callTransport when
// its connection is Backplane's own (mcpstream), whose messages carry their
// exact bytes; any other (the SDK's in-memory and IO transports, whose
// connections the SDK tells of the session's state through an unexported
// method a wrapper would hide) is left as it is.
func (s *Server) stdioTransport(t mcp.Transport) (mcp.Transport, *callTransport) {
	if _, ok := t.(*mcpstream.Transport); !ok {
		return t, nil
	}
	ct := &callTransport{Transport: t, s: s}
	return ct, ct
}
