package server

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/tool"
)

// An upstream's input requests, relayed to a 2026-07-28 caller (multi
// round-trip requests, SEP-2322).
//
// When the upstream behind a call answers input_required, the backend
// returns *tool.InputRequiredError to the gateway (the call's client
// defers input: modernClient), which settles the attempt failed, class
// input_required (gateway/continue.go: the upstream did not complete the
// call). The caller is answered input_required with the upstream's
// requests, each naming the server that asks (_meta["backplane/server"]
// and, for an elicitation, its message), and a requestState of
// Backplane's own (requeststate.go) that binds the caller, the tool, its
// definition, the arguments' digest, an expiry, the attempt's call id, the
// upstream's own state and the ids of the requests asked.
//
// The client's retry (a new request, with inputResponses and the state)
// continues the attempt: gateway.CallRequest.Continues and Input, so the
// upstream gets its own state back with the answers. The continuation is
// recorded under the continuation key "continues:ATTEMPT-ID", once: the same state
// presented again replays the continuation's recorded outcome and never
// runs the upstream a second time (one whose outcome is unknown stays
// unknown, never re-run). Any replica with the request-state key serves
// the retry: nothing of the attempt is held in a process.
//
// Only requests the server's bridge relays reach this point (the
// upstream's side refuses the others: backend/upstream's Bridge); each is
// checked here against the capabilities the client declared in its
// request, and a request the client did not declare fails the call (the
// revision forbids sending it), as does an upstream state too large to
// carry.

// inputStateTTL is how long a client has to answer an upstream's input
// requests and retry.
const inputStateTTL = 10 * time.Minute

// maxInputRounds bounds how many times the continuations of one call may
// be asked for input again.
const maxInputRounds = 10

// MetaServer, in an input_required result's _meta, names the upstream
// server whose requests it relays (each request's own _meta names it too).
const MetaServer = "backplane/server"

// DefersInput implements tool.InputDeferrer: a 2026-07-28 client answers
// an upstream's requests by calling again.
func (modernClient) DefersInput() bool { return true }

// declares says why the client of mc cannot be sent the input request
// req, if it cannot: it did not declare the capability in its request.
func (m modernCall) declares(req tool.InputRequest) error {
	c := m.caps
	var ok bool
	switch req.Method {
	case tool.RequestSampling:
		//lint:ignore SA1019 sampling is deprecated at 2026-07-28 and still in force: an upstream may ask for it
		ok = c != nil && c.Sampling != nil
	case tool.RequestRoots:
		//lint:ignore SA1019 roots are deprecated at 2026-07-28 and still in force: an upstream may ask for them
		ok = c != nil && c.RootsV2 != nil
	case tool.RequestElicitation:
		var p struct {
			Mode string `json:"mode"`
		}
		json.Unmarshal(req.Params, &p)
		if c != nil && c.Elicitation != nil {
			e := c.Elicitation
			if p.Mode == "url" {
				ok = e.URL != nil
			} else {
				ok = e.Form != nil || e.URL == nil
			}
		}
	}
	if !ok {
		return fmt.Errorf("the client did not declare %s in its request's capabilities", req.Method)
	}
	return nil
}

// relayInput answers input_required with the upstream's requests of ir,
// for the call of cr whose attempt ge is.
func (s *Server) relayInput(cr gateway.CallRequest, mc modernCall, ge *gateway.Error, ir *tool.InputRequiredError) *mcp.CallToolResult {
	fail := func(why string) *mcp.CallToolResult {
		e := &gateway.Error{Class: tool.ClassUnsupported, Message: "the upstream server " + ir.Server + " asked for input this call cannot relay: " + why,
			CallID: ge.CallID, Tool: cr.Tool, Step: "invoke", Details: map[string]any{"status": "failed", "server": ir.Server}}
		s.log.Info("upstream input not relayed", "call_id", ge.CallID, "tool", cr.Tool, "server", ir.Server, "reason", why)
		return resultTyped(errorResult(e, s.declaresOutput(cr.Tool, nil, e)), "complete")
	}
	digest, err := canonjson.Digest(cr.Arguments)
	_, defHash, known := s.g.Tool(cr.Tool)
	if err != nil || !known {
		return fail("the tool changed meanwhile")
	}
	reqs, keys, why := s.inputRequests(mc, ir)
	if why != "" {
		return fail(why)
	}
	round := 0
	if cr.Input != nil {
		round = cr.Input.Round + 1
	}
	if round >= maxInputRounds {
		return fail(fmt.Sprintf("it asked again after %d rounds", round))
	}
	state := s.states.sign(requestState{
		Method: "tools/call", Call: ge.CallID, Caller: cr.Caller, Tool: cr.Tool, DefHash: defHash, Digest: digest,
		Server: ir.Server, Upstream: ir.State, Keys: keys, Round: round, Expires: time.Now().Add(inputStateTTL).Unix(),
	})
	res := &mcp.CallToolResult{Meta: mcp.Meta{MetaServer: ir.Server, MetaCallID: ge.CallID}, InputRequests: reqs, RequestState: state}
	return resultTyped(res, "input_required")
}

// inputRequests are ir's requests as the client is sent them, and their
// ids; why says why they cannot be, if they cannot.
func (s *Server) inputRequests(mc modernCall, ir *tool.InputRequiredError) (mcp.InputRequestMap, []string, string) {
	if len(ir.State) > maxUpstreamStateBytes {
		return nil, nil, fmt.Sprintf("its request state is %d bytes, over the %d carried", len(ir.State), maxUpstreamStateBytes)
	}
	keys := slices.Sorted(maps.Keys(ir.Requests))
	wire := make(map[string]any, len(keys))
	for _, k := range keys {
		r := ir.Requests[k]
		if err := mc.declares(r); err != nil {
			return nil, nil, fmt.Sprintf("input request %q: %v", k, err)
		}
		wire[k] = map[string]any{"method": r.Method, "params": r.Params}
	}
	data, err := json.Marshal(wire)
	var out mcp.InputRequestMap
	if err == nil {
		err = json.Unmarshal(data, &out)
	}
	if err != nil {
		return nil, nil, "its input requests cannot be read: " + err.Error()
	}
	return out, keys, ""
}

// continueInput makes cr the continuation of the call st names, with the
// client's answers to the requests st lists.
func (s *Server) continueInput(cr *gateway.CallRequest, st requestState, responses mcp.InputResponseMap) error {
	in, err := answersOf(st, responses)
	if err != nil {
		return s.stateRefused(*cr, "tools/call", err.Error())
	}
	cr.Continues, cr.Input = st.Call, in
	return nil
}

// answersOf are the client's answers to the requests st lists, with the
// upstream's state (answers to others are left out, as the revision says
// a server ignores what it did not ask for; one missing is not sent, and
// the upstream asks again).
func answersOf(st requestState, responses mcp.InputResponseMap) (*tool.InputAnswers, error) {
	in := &tool.InputAnswers{State: st.Upstream, Responses: map[string]json.RawMessage{}, Round: st.Round}
	for _, k := range st.Keys {
		v, ok := responses[k]
		if !ok {
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("inputResponses[%q] cannot be read: %v", k, err)
		}
		in.Responses[k] = raw
	}
	return in, nil
}

// maxUnboundAnswers caps the answers a call without a request state may
// hand on.
const maxUnboundAnswers = 64

// unboundAnswers are the answers of a call that carries no request state
// (the revision's retry of a server that asked without one): handed to the
// backend as they are, with a call of its own (no continuation, the
// approval asked as for any call). The upstream treats them as it treats
// any input it did not ask for.
func unboundAnswers(responses mcp.InputResponseMap) (*tool.InputAnswers, error) {
	if len(responses) > maxUnboundAnswers {
		return nil, fmt.Errorf("%d inputResponses without a requestState, over the %d handed on", len(responses), maxUnboundAnswers)
	}
	in := &tool.InputAnswers{Responses: make(map[string]json.RawMessage, len(responses))}
	for k, v := range responses {
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("inputResponses[%q] cannot be read: %v", k, err)
		}
		in.Responses[k] = raw
	}
	return in, nil
}

// asInputRequired finds the upstream's input requests in err.
func asInputRequired(err error) (*tool.InputRequiredError, bool) {
	var ir *tool.InputRequiredError
	return ir, errors.As(err, &ir)
}

// resources/read and prompts/get (the other requests that may answer
// input_required): the same relay, without a journal entry (a read or a
// get is not a call: its retry is sent to the upstream again with the
// answers, as the revision's retry is a new request). The state binds the
// method, the caller, the resource's URI or the prompt's name, the
// upstream's state, the requests' ids and an expiry.

// contentVia is what goes with a resources/read or prompts/get of name to
// the content source: the request's client (its session's for a
// 2025-11-25 session, one that defers input at 2026-07-28) and, on a
// retry, the client's answers to the upstream's requests, from the
// verified state.
func (s *Server) contentVia(req mcp.Request, caller, method, name, state string, responses mcp.InputResponseMap) (*tool.Call, modernCall, error) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	via := &tool.Call{CallID: "content_" + rand.Text()[:16], Caller: caller}
	if !isModernRequest(req) {
		via.Session = s.sessionID(ss)
		via.Client = newSessionClient(ss, nil)
		return via, modernCall{}, nil
	}
	mc := modernCall{version: ModernProtocolVersion}
	switch r := req.(type) {
	case *mcp.ReadResourceRequest:
		mc.client, mc.caps = r.ClientInfo(), r.ClientCapabilities()
	case *mcp.GetPromptRequest:
		mc.client, mc.caps = r.ClientInfo(), r.ClientCapabilities()
	}
	if ss != nil {
		via.Client = modernClient{sessionClient: &sessionClient{ss: ss}}
	}
	cr := gateway.CallRequest{Caller: caller, Tool: name}
	if state == "" {
		if len(responses) > 0 {
			in, err := unboundAnswers(responses)
			if err != nil {
				return nil, mc, s.stateRefused(cr, method, err.Error())
			}
			via.Input = in
		}
		return via, mc, nil
	}
	st, err := s.verifyState(cr, state, method)
	if err != nil {
		return nil, mc, err
	}
	if st.Server == "" {
		return nil, mc, s.stateRefused(cr, method, "it names no upstream request")
	}
	if via.Input, err = answersOf(st, responses); err != nil {
		return nil, mc, s.stateRefused(cr, method, err.Error())
	}
	return via, mc, nil
}

// relayContentInput answers input_required for a resources/read or
// prompts/get of name whose upstream asks ir; a request the client cannot
// be sent fails the request.
func (s *Server) relayContentInput(mc modernCall, method, caller, name string, via *tool.Call, ir *tool.InputRequiredError) (mcp.Result, error) {
	reqs, keys, why := s.inputRequests(mc, ir)
	round := 0
	if via.Input != nil {
		round = via.Input.Round + 1
	}
	if why == "" && round >= maxInputRounds {
		why = fmt.Sprintf("it asked again after %d rounds", round)
	}
	if why != "" {
		s.log.Info("upstream input not relayed", "method", method, "name", name, "server", ir.Server, "reason", why)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: method + ": the upstream server " + ir.Server + " asked for input this request cannot relay: " + why}
	}
	state := s.states.sign(requestState{
		Method: method, Caller: caller, Tool: name, Server: ir.Server, Upstream: ir.State, Keys: keys, Round: round,
		Expires: time.Now().Add(inputStateTTL).Unix(),
	})
	meta := mcp.Meta{MetaServer: ir.Server}
	if method == "resources/read" {
		return &mcp.ReadResourceResult{Meta: meta, InputRequests: reqs, RequestState: state}, nil
	}
	return &mcp.GetPromptResult{Meta: meta, InputRequests: reqs, RequestState: state}, nil
}
