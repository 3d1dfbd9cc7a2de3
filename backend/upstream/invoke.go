package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/mcpstream"
	"github.com/agentbackplane/backplane/tool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// notDispatched are the JSON-RPC error codes that prove the server did not
// run the call: the request could not be parsed (-32700), was not a valid
// request (-32600), named no method the server has (-32601), or had
// invalid parameters (-32602, which is also how MCP reports an unknown
// tool). Any other error may come from a tool that ran, in part or in full.
var notDispatched = map[int64]bool{
	jsonrpc.CodeParseError:     true,
	jsonrpc.CodeInvalidRequest: true,
	jsonrpc.CodeMethodNotFound: true,
	jsonrpc.CodeInvalidParams:  true,
}

// toolBackend calls one tool of the server.
type toolBackend struct {
	u    *Upstream
	name string // the server's name for the tool
	// output checks the structuredContent of results against the tool's
	// outputSchema (hasOutput: it declares one; output is nil when the
	// validator cannot compile it, and the tool's calls are refused).
	output    tool.Validator
	hasOutput bool
}

// Invoke sends tools/call with the validated arguments; see the package
// documentation for the outcomes.
func (b *toolBackend) Invoke(ctx context.Context, call *tool.Call) (*tool.Result, error) {
	u := b.u
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("%w: upstream %s: %v", tool.ErrNotStarted, u.srv.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: upstream %s: %w", tool.ErrNotStarted, u.srv.Name, err)
	}
	// The caller's own token, per_caller and exchange (percaller.go).
	if ctx, call, err = u.ready(ctx, call); err != nil {
		return nil, err
	}
	in := u.calls.begin(ctx, call)
	defer u.calls.end(in)
	params := &sdk.CallToolParams{
		Meta:      call.Trace.Meta(), // traceparent, tracestate
		Name:      b.name,
		Arguments: json.RawMessage(call.Arguments),
	}
	progress, logs := listens(call.Client)
	if progress {
		// The gateway's own token, unique on the connection: the client's
		// is not (two clients may both use 1), and is restored on relay.
		if params.Meta == nil {
			params.Meta = sdk.Meta{}
		}
		params.Meta["progressToken"] = in.token
	}
	if l.logs && logs {
		// Every message, as logging/setLevel debug asks at 2025-11-25:
		// each calling session filters by its own level when relayed.
		if params.Meta == nil {
			params.Meta = sdk.Meta{}
		}
		//lint:ignore SA1019 logging is deprecated at 2026-07-28 and still in force; upstream log messages are relayed
		params.Meta[sdk.MetaKeyLogLevel] = "debug"
	}
	if meta := u.callCapabilities(l, call.Client); meta != nil {
		if params.Meta == nil {
			params.Meta = sdk.Meta{}
		}
		params.Meta[sdk.MetaKeyClientCapabilities] = meta
	}
	var asked bool // a round answered input_required
	if call.Input != nil {
		// The retry of a call answered *tool.InputRequiredError.
		responses, err := answers(call.Input)
		if err != nil {
			return nil, err
		}
		params.InputResponses, params.RequestState = responses, call.Input.State
		asked = true
	}
	defers := false
	if d, ok := call.Client.(tool.InputDeferrer); ok {
		defers = d.DefersInput()
	}
	shed := 0
	steppedUp := false
	for round := 1; ; round++ {
		res, err := b.round(ctx, l, in, call, params, asked)
		if err != nil && !asked && !steppedUp {
			// Refused for lack of a scope (per_caller): the caller is asked
			// to grant it, and the call, which did not run, is sent again
			// once it has (percaller.go).
			if serr, ok := u.stepUp(ctx, call); ok {
				if serr != nil {
					return nil, serr
				}
				steppedUp = true
				continue
			}
		}
		if err != nil || res.input == nil {
			if res != nil {
				return res.result, nil
			}
			return nil, err
		}
		// input_required (2026-07-28): the call's own client answers, and
		// the server is called again with the answers.
		asked = true
		if len(res.input.requests) == 0 {
			shed++
		}
		switch {
		case shed >= maxShedRounds:
			return nil, fmt.Errorf("upstream %s answered input_required with no request %d times (load shedding): giving up", u.srv.Name, shed)
		case round >= maxRounds:
			return nil, fmt.Errorf("upstream %s still asked for input after %d rounds: giving up", u.srv.Name, round)
		}
		if defers && len(res.input.requests) > 0 {
			return nil, u.deferred(ctx, in, res.input)
		}
		responses, err := u.fulfil(ctx, in, res.input)
		if err != nil {
			return nil, err
		}
		next := *params
		next.InputResponses, next.RequestState = responses, res.input.state
		params = &next
	}
}

// listens is what of a call's notifications its client can take (see
// tool.ListeningClient): progress only with a client, both when the client
// does not say. What it cannot take is not asked of the server: a Go SDK
// server, say, reads each member of a request's _meta it is sent.
func listens(c tool.Client) (progress, logs bool) {
	if c == nil {
		return false, true
	}
	if lc, ok := c.(tool.ListeningClient); ok {
		return lc.Listens()
	}
	return true, true
}

// roundResult is what one tools/call round came to: the call's result, or
// the input the server asks for before it answers.
type roundResult struct {
	result *tool.Result
	input  *inputRound
}

// round sends tools/call once; see the package documentation for the
// outcomes. after says an earlier round of the call was answered
// input_required: the server has had the call, so a failure is no longer
// proof that nothing ran.
func (b *toolBackend) round(ctx context.Context, l *link, in *inflight, call *tool.Call, params *sdk.CallToolParams, after bool) (*roundResult, error) {
	u := b.u
	e := &exchange{method: "tools/call"}
	nudge := l.nudgeWhileWaiting() // a stalled Go server: see nudge.go
	var res *sdk.CallToolResult
	var callErr error
	if meta, ok := l.directMeta(params); ok {
		args, _ := params.Arguments.(json.RawMessage) // directMeta checked
		callErr = l.callDirect(ctx, e, meta, params.Name, args)
	} else {
		res, callErr = l.sess.CallTool(withExchange(withTrace(ctx, call.Trace), e), params)
	}
	nudge.stop()
	l.wire.forget(e)
	sent, done, raw, rpcErr := e.state()
	var m map[string]json.RawMessage // raw's members, read once
	var merr error
	if done && rpcErr == nil {
		m, merr = members(raw)
		if ir, ok, err := inputRequired(m, merr); ok {
			if err != nil {
				return nil, err
			}
			return &roundResult{input: ir}, nil
		}
	}
	in.drain(ctx)
	notStarted := tool.ErrNotStarted
	if after {
		notStarted = errAfterInput
	}
	switch {
	case done && errors.Is(rpcErr, mcpstream.ErrMalformedResponse):
		// The server answered this call, in a line the gateway cannot
		// read (too deep, too large): the tool ran, its result is lost.
		return nil, fmt.Errorf("%w: upstream %s: %v", tool.ErrMalformedResult, u.srv.Name, rpcErr)
	case done && rpcErr != nil:
		var we *jsonrpc.Error
		if errors.As(rpcErr, &we) && notDispatched[we.Code] {
			return nil, fmt.Errorf("%w: upstream %s refused the call before running it: %v", notStarted, u.srv.Name, rpcErr)
		}
		return nil, fmt.Errorf("upstream %s answered with an error: %v", u.srv.Name, rpcErr)
	case done:
		// The raw answer is what counts, even when the SDK could not decode
		// it: the tool ran. (Over stdio the SDK does not decode it at all:
		// callErr is errTakenRaw, see trackedConn.Read.)
		r, err := b.checked(resultOfMembers(raw, m, merr))
		return wrapRound(r, err)
	case !sent:
		if callErr == nil {
			callErr = errors.New("no answer")
		}
		return nil, fmt.Errorf("%w: upstream %s: the request was not sent: %w", notStarted, u.srv.Name, callErr)
	case callErr != nil:
		return nil, fmt.Errorf("upstream %s: the request was sent and then: %w", u.srv.Name, callErr)
	}
	// An answer the wire did not show (cannot happen while every message
	// passes the watch): fall back to the SDK's reading of it.
	data, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("%w: upstream %s: %v", tool.ErrMalformedResult, u.srv.Name, err)
	}
	return wrapRound(b.checked(resultOf(data)))
}

func wrapRound(r *tool.Result, err error) (*roundResult, error) {
	if err != nil {
		return nil, err
	}
	return &roundResult{result: r}, nil
}

// errAfterInput stands in for tool.ErrNotStarted in a round after the
// server answered input_required: the server had the call (and may have
// acted before it asked), so what would prove nothing ran does not.
var errAfterInput = errors.New("after the server asked for input")

// checked validates a result's structuredContent against the tool's
// output schema: a result that is not an error and breaks it (or has no
// structuredContent, which a tool with an output schema must give) comes
// back as a *tool.InvalidResultError with every violation, pointers
// into the structured content. A tool error (isError) is not checked: the
// schema describes what the tool returns when it succeeds.
func (b *toolBackend) checked(res *tool.Result, err error) (*tool.Result, error) {
	if err != nil || !b.hasOutput || res.IsError {
		return res, err
	}
	if b.output == nil { // cannot happen: its calls are refused before
		return nil, fmt.Errorf("%w: upstream %s: the output schema of %s cannot be checked", tool.ErrNotStarted, b.u.srv.Name, b.name)
	}
	m, merr := members(res.Content)
	if merr != nil {
		return nil, fmt.Errorf("%w: the tools/call result: %v", tool.ErrMalformedResult, merr)
	}
	sc, ok := m["structuredContent"]
	if !ok || string(sc) == "null" {
		return nil, &tool.InvalidResultError{Result: res.Content, Err: &inputschema.Error{
			Class: inputschema.ClassValidation, Stage: stageResult, Path: "$structuredContent", Pointer: "",
			Message: "the result has no structuredContent, which a tool with an outputSchema must return",
		}}
	}
	verr := b.output.ValidateJSONAll(sc)
	if verr == nil {
		return res, nil
	}
	return nil, &tool.InvalidResultError{Result: res.Content, Err: inResult(verr)}
}

// stageResult is the stage of a result's violations.
const stageResult inputschema.Stage = "result"

// inResult rewrites validation errors about a value checked as arguments
// into errors about the structured content: their display paths start at
// $structuredContent, their stage is result (the pointers are already
// into the value checked).
func inResult(err error) error {
	fix := func(e *inputschema.Error) {
		if rest, ok := strings.CutPrefix(e.Path, "$arguments"); ok {
			e.Path = "$structuredContent" + rest
		}
		if e.Stage == inputschema.StageArguments {
			e.Stage = stageResult
		}
	}
	var list *inputschema.ErrorList
	var one *inputschema.Error
	switch {
	case errors.As(err, &list):
		for _, e := range list.Errors {
			fix(e)
		}
	case errors.As(err, &one):
		fix(one)
	default:
		return &inputschema.Error{Class: inputschema.ClassValidation, Stage: stageResult, Path: "$structuredContent", Message: err.Error()}
	}
	return err
}

// resultOf turns a raw tools/call result into the backend's result:
// {content, structuredContent, isError}, each member as the server sent it
// and only those it sent, isError always (false when absent).
func resultOf(raw []byte) (*tool.Result, error) {
	m, err := members(raw)
	return resultOfMembers(raw, m, err)
}

// resultOfMembers is resultOf given raw's members (members(raw)).
func resultOfMembers(raw []byte, m map[string]json.RawMessage, err error) (*tool.Result, error) {
	if err != nil {
		return nil, fmt.Errorf("%w: the tools/call result: %v", tool.ErrMalformedResult, err)
	}
	isError := false
	if v, ok := m["isError"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &isError); err != nil {
			return nil, fmt.Errorf("%w: the tools/call result: isError is not a boolean", tool.ErrMalformedResult)
		}
	}
	// At most the members of raw plus their names: one allocation.
	b := make([]byte, 0, len(raw)+len(`{"content":,"structuredContent":,"isError":false}`))
	b = append(b, '{')
	if v, ok := m["content"]; ok {
		b = append(b, `"content":`...)
		b = append(b, v...)
		b = append(b, ',')
	}
	if v, ok := m["structuredContent"]; ok {
		b = append(b, `"structuredContent":`...)
		b = append(b, v...)
		b = append(b, ',')
	}
	b = append(b, `"isError":`...)
	b = strconv.AppendBool(b, isError)
	b = append(b, '}')
	return &tool.Result{Content: b, IsError: isError}, nil
}
