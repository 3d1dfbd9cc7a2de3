package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/tool"
)

// Multi round-trip requests (2026-07-28, SEP-2322).
//
// At 2026-07-28 a server does not send its client requests in the middle of
// a call: it answers the call with resultType "input_required", the
// requests it needs answered (elicitation, sampling, roots) and an opaque
// requestState, and the client calls again with the answers
// (inputResponses) and the state. The gateway relays each request to the
// client behind that very call (its tool.Client, which speaks the
// caller's revision), so the requests of any number of calls in flight on
// one server each reach their own client: nothing has to be guessed, unlike
// a 2025-11-25 server's requests, which name no call (bridge.go).
//
// The SDK's own client loop (MultiRoundTripOptions) is not used: it
// answers roots from the client's static list and hands the rest to one
// handler per client, where the gateway needs the call's client and the
// raw result of the last round (D20).

// Bounds of one call's rounds, as the SDK's own loop has them: a server that
// keeps asking, or keeps shedding load (input_required with no request),
// gets an error.
const (
	maxRounds     = 10
	maxShedRounds = 3
)

// inputRound is an input_required result: the requests by the server's ids,
// each with its method and raw params, and the state to echo.
type inputRound struct {
	requests map[string]inputRequest
	state    string
}

type inputRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// inputRequired reads a tools/call result, given its members (members(raw)
// and its error): ok when it is input_required.
func inputRequired(m map[string]json.RawMessage, merr error) (r *inputRound, ok bool, err error) {
	if merr != nil {
		return nil, false, nil // resultOf says what is wrong with it
	}
	v, has := m["resultType"]
	if !has || string(v) == `"complete"` {
		return nil, false, nil // the common answer, without decoding it
	}
	var rt string
	if json.Unmarshal(v, &rt) != nil || rt != "input_required" {
		return nil, false, nil
	}
	r = &inputRound{}
	if v, has := m["inputRequests"]; has && string(v) != "null" {
		if err := json.Unmarshal(v, &r.requests); err != nil {
			return nil, true, fmt.Errorf("%w: the input_required result: inputRequests: %v", tool.ErrMalformedResult, err)
		}
	}
	if v, has := m["requestState"]; has && string(v) != "null" {
		if err := json.Unmarshal(v, &r.state); err != nil {
			return nil, true, fmt.Errorf("%w: the input_required result: requestState is not a string", tool.ErrMalformedResult)
		}
	}
	return r, true, nil
}

// fulfil relays each request of r to the client of in, in the order of the
// server's ids, and returns the answers for the retry. Each relay is
// audited as a request the server makes during a call is. A request the
// bridge does not allow, or that the client cannot answer, fails the call:
// the server gets no retry.
func (u *Upstream) fulfil(ctx context.Context, in *inflight, r *inputRound) (sdk.InputResponseMap, error) {
	out := make(sdk.InputResponseMap, len(r.requests))
	for _, id := range slices.Sorted(maps.Keys(r.requests)) {
		req := r.requests[id]
		raw, err := u.fulfilOne(ctx, in, req)
		outcome := "relayed"
		attrs := []any{"method", req.Method, "call_id", in.callID, "via", "input_required"}
		if err != nil {
			outcome = "refused"
			attrs = append(attrs, "error", err.Error())
		}
		u.record(ctx, attrs, outcome)
		if err != nil {
			return nil, fmt.Errorf("upstream %s asked the client for %s (input request %q): %w", u.srv.Name, req.Method, id, err)
		}
		res := newRelayResult(req.Method)
		if err := json.Unmarshal(raw, res); err != nil {
			return nil, fmt.Errorf("upstream %s asked the client for %s: the client's answer cannot be read: %v", u.srv.Name, req.Method, err)
		}
		out[id] = res
	}
	return out, nil
}

// deferred is the *tool.InputRequiredError of r, for a client that
// answers by calling again (tool.InputDeferrer): the requests marked as
// relayed ones are, and the server's request state as the error's state.
func (u *Upstream) deferred(ctx context.Context, in *inflight, r *inputRound) error {
	e := &tool.InputRequiredError{Server: u.srv.Name, Requests: make(map[string]tool.InputRequest, len(r.requests)), State: r.state}
	for _, id := range slices.Sorted(maps.Keys(r.requests)) {
		req := r.requests[id]
		params, err := u.prepareInput(req)
		outcome := "deferred"
		attrs := []any{"method", req.Method, "call_id", in.callID, "via", "input_required"}
		if err != nil {
			outcome = "refused"
			attrs = append(attrs, "error", err.Error())
		}
		u.record(ctx, attrs, outcome)
		if err != nil {
			return fmt.Errorf("upstream %s asked the client for %s (input request %q): %w", u.srv.Name, req.Method, id, err)
		}
		e.Requests[id] = tool.InputRequest{Method: req.Method, Params: params}
	}
	return e
}

// prepareInput checks that the bridge relays req and marks its params.
func (u *Upstream) prepareInput(req inputRequest) (json.RawMessage, error) {
	if err := u.bridged(req.Method); err != nil {
		return nil, err
	}
	var p any
	if len(req.Params) > 0 && string(req.Params) != "null" {
		p = req.Params
	}
	params, err := u.prepare(req.Method, p)
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return nil, errors.New(je.Message)
	}
	return params, err
}

// answers are the retry's inputResponses from the client's answers.
func answers(a *tool.InputAnswers) (sdk.InputResponseMap, error) {
	if len(a.Responses) == 0 {
		return nil, nil
	}
	data, err := json.Marshal(a.Responses)
	if err != nil {
		return nil, err
	}
	var m sdk.InputResponseMap
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: the client's input responses: %v", tool.ErrNotStarted, err)
	}
	return m, nil
}

// bridged says why method may not be relayed, if it may not.
func (u *Upstream) bridged(method string) error {
	var allowed bool
	switch method {
	case tool.RequestSampling:
		allowed = u.bridge.Sampling
	case tool.RequestElicitation:
		allowed = u.bridge.Elicitation
	case tool.RequestRoots:
		allowed = u.bridge.Roots
	default:
		return fmt.Errorf("%q is not a request a server may make of its client", method)
	}
	if !allowed {
		return fmt.Errorf("%s is not bridged to the clients of this gateway", method)
	}
	return nil
}

func (u *Upstream) fulfilOne(ctx context.Context, in *inflight, req inputRequest) (json.RawMessage, error) {
	if err := u.bridged(req.Method); err != nil {
		return nil, err
	}
	if in.client == nil {
		return nil, errNoClient
	}
	var p any
	if len(req.Params) > 0 && string(req.Params) != "null" {
		p = req.Params
	}
	raw, err := u.ask(ctx, in, req.Method, p)
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return nil, errors.New(je.Message)
	}
	return raw, err
}

// contentRounds runs a resources/read or prompts/get (send, one round with
// the answers and state of the round before) until the server answers
// without asking for input (needs reads a result: its requests, its
// state, whether it asks). Its requests go to via's client as those of a
// tools/call do: deferred to a client that answers by calling again
// (*tool.InputRequiredError), else relayed and the server asked again.
// While it runs, the request counts as a call in flight of via's session,
// so that a 2025-11-25 server's requests during it reach that client under
// the same rules as during a call (bridge.go). A read or a get is not a
// journaled call: the rounds of a retry are simply sent again.
func contentRounds[R any](ctx context.Context, u *Upstream, via *tool.Call, send func(sdk.InputResponseMap, string) (R, error), needs func(R) (sdk.InputRequestMap, string, bool)) (R, error) {
	var zero R
	if via == nil {
		via = &tool.Call{}
	}
	in := u.calls.begin(ctx, via)
	defer u.calls.end(in)
	var responses sdk.InputResponseMap
	var state string
	if via.Input != nil {
		var err error
		if responses, err = answers(via.Input); err != nil {
			return zero, err
		}
		state = via.Input.State
	}
	defers := false
	if d, ok := via.Client.(tool.InputDeferrer); ok {
		defers = d.DefersInput()
	}
	shed := 0
	for round := 1; ; round++ {
		res, err := send(responses, state)
		if err != nil {
			return zero, err
		}
		reqs, st, asks := needs(res)
		if !asks {
			return res, nil
		}
		r, err := roundOf(reqs, st)
		if err != nil {
			return zero, err
		}
		if len(r.requests) == 0 {
			shed++
		}
		switch {
		case shed >= maxShedRounds:
			return zero, fmt.Errorf("upstream %s answered input_required with no request %d times (load shedding): giving up", u.srv.Name, shed)
		case round >= maxRounds:
			return zero, fmt.Errorf("upstream %s still asked for input after %d rounds: giving up", u.srv.Name, round)
		}
		if defers && len(r.requests) > 0 {
			return zero, u.deferred(ctx, in, r)
		}
		if responses, err = u.fulfil(ctx, in, r); err != nil {
			return zero, err
		}
		state = r.state
	}
}

// roundOf is the inputRound of the SDK's decoded requests.
func roundOf(reqs sdk.InputRequestMap, state string) (*inputRound, error) {
	r := &inputRound{state: state}
	if len(reqs) == 0 {
		return r, nil
	}
	data, err := json.Marshal(reqs)
	if err == nil {
		err = json.Unmarshal(data, &r.requests)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: the input_required result: inputRequests: %v", tool.ErrMalformedResult, err)
	}
	return r, nil
}

// callCapabilities are the client capabilities a call to a 2026-07-28
// server declares in its _meta: what the bridge relays and the call's
// client declared (tool.CapableClient), so that the server asks only for
// what can be answered (nil: the connection's own, for a server of an
// earlier revision or a client that does not say).
func (u *Upstream) callCapabilities(l *link, c tool.Client) map[string]any {
	cc, ok := c.(tool.CapableClient)
	if !ok || !l.modern() {
		return nil
	}
	caps := cc.Capabilities()
	out := map[string]any{}
	if u.bridge.Sampling && caps.Sampling {
		out["sampling"] = map[string]any{}
	}
	if u.bridge.Roots && caps.Roots {
		out["roots"] = map[string]any{}
	}
	if u.bridge.Elicitation && (caps.Elicitation || caps.ElicitationURL) {
		e := map[string]any{}
		if caps.Elicitation {
			e["form"] = map[string]any{}
		}
		if caps.ElicitationURL {
			e["url"] = map[string]any{}
		}
		out["elicitation"] = e
	}
	return out
}

// contentMeta is the _meta of a resources/read or prompts/get sent for via:
// its client's capabilities, as callCapabilities says.
func (u *Upstream) contentMeta(l *link, via *tool.Call) sdk.Meta {
	if via == nil {
		return nil
	}
	if caps := u.callCapabilities(l, via.Client); caps != nil {
		return sdk.Meta{sdk.MetaKeyClientCapabilities: caps}
	}
	return nil
}
