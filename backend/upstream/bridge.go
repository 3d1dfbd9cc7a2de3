//lint:file-ignore SA1019 sampling, roots and logging are deprecated only from protocol 2026-07-28; the versions relayed here (2025-11-25 and older) have them, and the issue asks for them.

package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/tool"
)

// Bridge says which requests a server may make of the client behind a
// call while the call runs: each one declared is declared to the server as
// a capability of the gateway's client, and relayed to the calling client
// when that client declared it too.
type Bridge struct {
	Sampling    bool // sampling/createMessage
	Elicitation bool // elicitation/create
	Roots       bool // roots/list
}

// DefaultBridge is the bridge of a server that sets none: elicitation and
// roots are relayed; sampling is not (it spends the client's model on the
// server's prompt).
func DefaultBridge() Bridge { return Bridge{Elicitation: true, Roots: true} }

// What arrives from the server during calls finds its call this way:
//
//   - Progress by token: each tools/call carries a progress token of the
//     gateway's own (unique on the connection), mapped back to the call,
//     whose client gets the progress under its own token.
//   - Input requests of a 2026-07-28 server (input_required) answer the
//     call itself: they go to its client, whatever else is in flight
//     (mrtr.go).
//   - Log messages and a 2025-11-25 server's requests carry nothing that
//     names a call (over stdio nothing could). They go to the calling session when the calls
//     in flight on the server all come from one session; with none in
//     flight, or calls of several sessions, a request is refused (the
//     server gets the protocol's error) and a log message goes to the
//     gateway's log only. Sending one session's message to another is
//     never a fallback.

// inflight is one call in flight on the server.
type inflight struct {
	ctx     context.Context // the call's: a relayed request ends with it
	callID  string
	session string
	client  tool.Client
	token   string
	// unrelayed counts the progress notifications read and not yet
	// relayed: the SDK hands notifications to their handler on another
	// goroutine than answers, so the answer may overtake the last ones.
	unrelayed atomic.Int64
}

// relayContext is the context of a relayed notification: the call's, whose
// values tell the client's side which request it belongs to (over
// streamable HTTP it then travels on that request's stream, not on the
// session's standalone one); it ends with the call.
func (in *inflight) relayContext(context.Context) context.Context { return in.ctx }

// calls are the calls in flight on one Upstream.
type calls struct {
	mu      sync.Mutex
	seq     uint64
	all     map[*inflight]struct{}
	byToken map[string]*inflight
	// logs are the log messages read and not yet handled, in the order
	// read, each with the call it was attributed to when read (the call may
	// have ended by the time the SDK hands it over).
	logs []pendingLog
}

type pendingLog struct {
	level, logger string
	owner         *inflight
}

func (c *calls) begin(ctx context.Context, call *tool.Call) *inflight {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all == nil {
		c.all, c.byToken = map[*inflight]struct{}{}, map[string]*inflight{}
	}
	c.seq++
	in := &inflight{ctx: ctx, callID: call.CallID, session: call.Session, client: call.Client, token: "backplane-" + strconv.FormatUint(c.seq, 10)}
	c.all[in] = struct{}{}
	c.byToken[in.token] = in
	return in
}

func (c *calls) end(in *inflight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.all, in)
	delete(c.byToken, in.token)
}

// seen is the wire's hook: it counts a progress notification of a call
// in flight as it is read, before the SDK hands it to onProgress.
func (c *calls) seen(msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.IsCall() {
		return
	}
	if req.Method == "notifications/message" {
		var p struct{ Level, Logger string }
		if json.Unmarshal(req.Params, &p) != nil {
			return
		}
		in, _, err := c.owner()
		if err != nil {
			return
		}
		c.mu.Lock()
		if len(c.logs) < maxPendingLogs {
			in.unrelayed.Add(1)
			c.logs = append(c.logs, pendingLog{level: p.Level, logger: p.Logger, owner: in})
		}
		c.mu.Unlock()
		return
	}
	if req.Method != "notifications/progress" {
		return
	}
	var p struct {
		ProgressToken any `json:"progressToken"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return
	}
	if in := c.byProgressToken(p.ProgressToken); in != nil {
		in.unrelayed.Add(1)
	}
}

// maxPendingLogs bounds the log messages awaiting their handler.
const maxPendingLogs = 1024

// logOwner is the call a log message read earlier was attributed to, when
// it is the next one pending; else the call in flight now.
func (c *calls) logOwner(level, logger string) (*inflight, bool, error) {
	c.mu.Lock()
	if len(c.logs) > 0 {
		head := c.logs[0]
		if head.level == level && head.logger == logger {
			c.logs = c.logs[1:]
			c.mu.Unlock()
			return head.owner, true, nil
		}
		// Out of step (a message the SDK did not hand over): start over.
		for _, pl := range c.logs {
			pl.owner.unrelayed.Add(-1)
		}
		c.logs = nil
	}
	c.mu.Unlock()
	in, _, err := c.owner()
	return in, false, err
}

// drainWait bounds how long a call's answer waits for the progress read
// before it to be relayed.
const drainWait = 2 * time.Second

// drain waits until the progress notifications read for in have been
// relayed (or drainWait passed, or ctx ended), so that a client gets every
// one before the call's answer.
func (in *inflight) drain(ctx context.Context) {
	if in.unrelayed.Load() <= 0 {
		return
	}
	t := time.NewTimer(drainWait)
	defer t.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for in.unrelayed.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-tick.C:
		}
	}
}

func (c *calls) byProgressToken(tok any) *inflight {
	s, ok := tok.(string)
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byToken[s]
}

// errNoCall and errAmbiguous say why a message found no call.
var (
	errNoCall    = errors.New("no call is in flight on the server")
	errAmbiguous = errors.New("calls of several sessions are in flight on the server: the message names none")
	errNoClient  = errors.New("the call in flight has no client to relay to")
)

// owner is the call a message without a token belongs to, and the ids of
// all the calls of its session in flight (for the audit). Every call in
// flight counts, those without a client too: a message of such a call must
// not go to another one's client.
func (c *calls) owner() (*inflight, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first *inflight
	var ids []string
	for in := range c.all {
		if first == nil {
			first = in
		} else if in.client == nil || first.client == nil || in.session == "" || in.session != first.session {
			return nil, nil, errAmbiguous
		}
		ids = append(ids, in.callID)
	}
	switch {
	case first == nil:
		return nil, nil, errNoCall
	case first.client == nil:
		return nil, nil, errNoClient
	}
	return first, ids, nil
}

// clientOptions are the gateway's client options for the server: the
// capabilities it may bridge, and the handlers of what the server sends.
func (u *Upstream) clientOptions() *sdk.ClientOptions {
	caps := &sdk.ClientCapabilities{}
	if u.bridge.Roots {
		caps.RootsV2 = &sdk.RootCapabilities{}
	}
	if u.bridge.Sampling {
		caps.Sampling = &sdk.SamplingCapabilities{}
	}
	if u.bridge.Elicitation {
		caps.Elicitation = &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}, URL: &sdk.URLElicitationCapabilities{}}
	}
	return &sdk.ClientOptions{
		Logger:       slog.New(u.sdkLog),
		Capabilities: caps,
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			// Called on the session's reading goroutine: listing here would
			// wait for an answer that goroutine must read. Signal instead.
			select {
			case u.relist <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: u.onProgress,
		LoggingMessageHandler:       u.onLog,
		ResourceUpdatedHandler:      u.onResourceUpdated,
		MultiRoundTrip:              &sdk.MultiRoundTripOptions{Disabled: true},
	}
}

// onProgress relays a progress notification to the client of its call.
func (u *Upstream) onProgress(ctx context.Context, req *sdk.ProgressNotificationClientRequest) {
	p := req.Params
	if p == nil {
		return
	}
	in := u.calls.byProgressToken(p.ProgressToken)
	if in == nil || in.client == nil {
		return // a late one, after its call ended, or not ours
	}
	defer in.unrelayed.Add(-1)
	if err := in.client.Progress(in.relayContext(ctx), tool.Progress{Progress: p.Progress, Total: p.Total, Message: p.Message}); err != nil {
		u.log.Debug("upstream progress not relayed", "call_id", in.callID, "error", err.Error())
	}
}

// onLog relays a log message to the calling session, when there is one.
func (u *Upstream) onLog(ctx context.Context, req *sdk.LoggingMessageRequest) {
	p := req.Params
	if p == nil {
		return
	}
	data, err := json.Marshal(p.Data)
	if err != nil {
		return
	}
	in, counted, err := u.calls.logOwner(string(p.Level), p.Logger)
	if err != nil {
		u.log.Debug("upstream log message", "level", string(p.Level), "logger", p.Logger, "data", string(data), "relayed", false, "why", err.Error())
		return
	}
	if counted {
		defer in.unrelayed.Add(-1)
	}
	if err := in.client.Log(in.relayContext(ctx), tool.LogMessage{Level: string(p.Level), Logger: p.Logger, Data: data}); err != nil {
		u.log.Debug("upstream log message not relayed", "call_id", in.callID, "error", err.Error())
	}
}

// bridgeMiddleware answers the server's requests of its client: relayed to
// the calling client, or refused with the protocol's error.
func (u *Upstream) bridgeMiddleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		var allowed bool
		switch method {
		case tool.RequestSampling:
			allowed = u.bridge.Sampling
		case tool.RequestElicitation:
			allowed = u.bridge.Elicitation
		case tool.RequestRoots:
			allowed = u.bridge.Roots
		default:
			return next(ctx, method, req)
		}
		res, callIDs, err := u.relay(ctx, method, req, allowed)
		outcome := "relayed"
		attrs := []any{"method", method, "call_id", firstOr(callIDs)}
		if len(callIDs) > 1 {
			attrs = append(attrs, "call_ids", callIDs)
		}
		if err != nil {
			outcome = "refused"
			attrs = append(attrs, "error", err.Error())
		}
		u.record(ctx, attrs, outcome)
		return res, err
	}
}

func firstOr(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// relay sends req to the calling client and decodes its answer.
func (u *Upstream) relay(ctx context.Context, method string, req sdk.Request, allowed bool) (sdk.Result, []string, error) {
	if !allowed {
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("%s is not bridged to the clients of this gateway", method)}
	}
	in, ids, err := u.calls.owner()
	if err != nil {
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("%s: no client to ask: %v", method, err)}
	}
	ids = append([]string{in.callID}, removeOne(ids, in.callID)...)
	var p any
	if rp := req.GetParams(); rp != nil && !reflectNil(rp) {
		p = rp
	}
	raw, err := u.ask(ctx, in, method, p)
	if err != nil {
		return nil, ids, err
	}
	res := newRelayResult(method)
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, ids, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s: the client's answer cannot be read: %v", method, err)}
	}
	return res, ids, nil
}

// reflectNil reports whether p is a typed nil pointer (the SDK's params of a
// request sent without any).
func reflectNil(p sdk.Params) bool {
	switch v := p.(type) {
	case *sdk.ElicitParams:
		return v == nil
	case *sdk.CreateMessageWithToolsParams:
		return v == nil
	case *sdk.CreateMessageParams:
		return v == nil
	case *sdk.ListRootsParams:
		return v == nil
	}
	return false
}

// relayResult is the SDK's type of a relayed request's answer: the result
// of a server-to-client request (2025-11-25), or an input response
// (2026-07-28).
type relayResult interface {
	sdk.Result
	sdk.InputResponse
}

// newRelayResult is the SDK's result type of a relayed request.
func newRelayResult(method string) relayResult {
	switch method {
	case tool.RequestSampling:
		return new(sdk.CreateMessageWithToolsResult)
	case tool.RequestElicitation:
		return new(sdk.ElicitResult)
	default:
		return new(sdk.ListRootsResult)
	}
}

// ask sends the calling client of in the server's request method with params
// p (an SDK params value or raw JSON; nil for none) and returns its raw
// answer. An elicitation is marked with the server's name
// (markElicitation), and every request's _meta names the server
// (MetaServer), so that a client can tell whose request it shows. The
// request ends with the call, and with ctx (the server's request, which the
// server may cancel). Errors are the protocol's, to hand back to the
// server: the client's own, or why it could not be asked.
func (u *Upstream) ask(ctx context.Context, in *inflight, method string, p any) (json.RawMessage, error) {
	params, err := u.prepare(method, p)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(in.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	raw, err := in.client.Request(rctx, method, params)
	if errors.Is(err, tool.ErrNoChannel) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("the client of this call does not support %s", method)}
	}
	if err != nil {
		var je *jsonrpc.Error
		if errors.As(err, &je) {
			return nil, je // the client's own error, passed on
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s: the client did not answer: %v", method, err)}
	}
	return raw, nil
}

// prepare is the params of a request relayed to the client: p (an SDK
// params value or raw JSON; nil for none) marked with the server's name.
func (u *Upstream) prepare(method string, p any) (json.RawMessage, error) {
	if raw, ok := p.(json.RawMessage); ok && method == tool.RequestElicitation {
		ep := new(sdk.ElicitParams)
		if err := json.Unmarshal(raw, ep); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": " + err.Error()}
		}
		p = ep
	}
	if ep, ok := p.(*sdk.ElicitParams); ok && ep != nil {
		p = u.markElicitation(ep)
	}
	params := json.RawMessage(`{}`)
	if p != nil {
		var err error
		if params, err = json.Marshal(p); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": " + err.Error()}
		}
	}
	params, err := withServerMeta(params, u.srv.Name)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": " + err.Error()}
	}
	return params, nil
}

// MetaServer is the _meta key of a request relayed from an upstream server
// to the calling client: its value is the server's name.
const MetaServer = "backplane/server"

// withServerMeta returns params (a JSON object) with _meta[MetaServer] set
// to name, the other members and _meta entries kept.
func withServerMeta(params json.RawMessage, name string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return nil, errors.New("the params are not a JSON object")
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := m["_meta"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil || meta == nil {
			return nil, errors.New("_meta is not a JSON object")
		}
	}
	meta[MetaServer], _ = json.Marshal(name)
	var err error
	if m["_meta"], err = json.Marshal(meta); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// markElicitation returns a copy of p whose message, and the requested
// schema's title when it has one, say which server asks: relayed to the
// client, an upstream's form would otherwise read as the gateway's own
// (one asked for an "operator token" in a form titled as a Backplane
// approval). The server's text is escaped (termtext.Block) so that no
// control hides the mark.
func (u *Upstream) markElicitation(p *sdk.ElicitParams) *sdk.ElicitParams {
	c := *p
	mark := ElicitationMark(u.srv.Name)
	c.Message = mark + termtext.Block(p.Message)
	if schema, ok := p.RequestedSchema.(map[string]any); ok {
		if title, ok := schema["title"].(string); ok {
			s := maps.Clone(schema)
			s["title"] = mark + termtext.Line(title)
			c.RequestedSchema = s
		}
	}
	return &c
}

// ElicitationMark is what begins the message of an elicitation relayed
// from the server named name.
func ElicitationMark(name string) string {
	return "[asked by MCP server " + name + ", not by Backplane] "
}

func removeOne(ids []string, id string) []string {
	for i, x := range ids {
		if x == id {
			return append(ids[:i:i], ids[i+1:]...)
		}
	}
	return ids
}

// askForLogs asks a server that offers logging for every message: each
// calling session filters by its own logging/setLevel when it is relayed.
//
// At 2026-07-28 there is no session to set a level on: each call asks for
// them in its own _meta (logLevel, see Invoke), and l.logs says so.
func (u *Upstream) askForLogs(ctx context.Context, l *link) {
	sess := l.sess
	ir := sess.InitializeResult()
	if ir == nil || ir.Capabilities == nil || ir.Capabilities.Logging == nil {
		return
	}
	if l.modern() {
		l.logs = true
		return
	}
	if err := sess.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "debug"}); err != nil {
		u.log.Debug("upstream logging/setLevel failed", "error", err.Error())
	}
}

// record writes the audit event of one request the server made of a
// call's client (outcome: relayed, deferred or refused) through the
// gateway (a tool.Recorder), the audit log's one writer.
func (u *Upstream) record(ctx context.Context, attrs []any, outcome string) {
	if u.audit == nil {
		return
	}
	attrs = append(append([]any{"server", u.srv.Name}, attrs...), "outcome", outcome)
	u.audit.Record(ctx, tool.Event{Msg: "upstream request", Attrs: attrs})
}
