package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/backend"
	"github.com/agentbackplane/backplane/internal/mcpstream"
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
}

// Invoke sends tools/call with the validated arguments; see the package
// documentation for the outcomes.
func (b *toolBackend) Invoke(ctx context.Context, call *backend.Call) (*backend.Result, error) {
	u := b.u
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("%w: upstream %s: %v", backend.ErrNotStarted, u.srv.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: upstream %s: %w", backend.ErrNotStarted, u.srv.Name, err)
	}
	in := u.calls.begin(ctx, call)
	defer u.calls.end(in)
	params := &sdk.CallToolParams{
		Meta:      call.Trace.Meta(), // traceparent, tracestate
		Name:      b.name,
		Arguments: json.RawMessage(call.Arguments),
	}
	if call.Client != nil {
		// The gateway's own token, unique on the connection: the client's
		// is not (two clients may both use 1), and is restored on relay.
		if params.Meta == nil {
			params.Meta = sdk.Meta{}
		}
		params.Meta["progressToken"] = in.token
	}
	e := &exchange{method: "tools/call"}
	nudge := l.nudgeWhileWaiting() // a stalled Go server: see nudge.go
	res, callErr := l.sess.CallTool(withExchange(withTrace(ctx, call.Trace), e), params)
	nudge.stop()
	l.wire.forget(e)
	in.drain(ctx)
	sent, done, raw, rpcErr := e.state()
	switch {
	case done && errors.Is(rpcErr, mcpstream.ErrMalformedResponse):
		// The server answered this call, in a line the gateway cannot
		// read (too deep, too large): the tool ran, its result is lost.
		return nil, fmt.Errorf("%w: upstream %s: %v", backend.ErrMalformedResult, u.srv.Name, rpcErr)
	case done && rpcErr != nil:
		var we *jsonrpc.Error
		if errors.As(rpcErr, &we) && notDispatched[we.Code] {
			return nil, fmt.Errorf("%w: upstream %s refused the call before running it: %v", backend.ErrNotStarted, u.srv.Name, rpcErr)
		}
		return nil, fmt.Errorf("upstream %s answered with an error: %v", u.srv.Name, rpcErr)
	case done:
		// The raw answer is what counts, even when the SDK could not decode
		// it: the tool ran. (Over stdio the SDK does not decode it at all:
		// callErr is errTakenRaw, see trackedConn.Read.)
		return resultOf(raw)
	case !sent:
		if callErr == nil {
			callErr = errors.New("no answer")
		}
		return nil, fmt.Errorf("%w: upstream %s: the request was not sent: %w", backend.ErrNotStarted, u.srv.Name, callErr)
	case callErr != nil:
		return nil, fmt.Errorf("upstream %s: the request was sent and then: %w", u.srv.Name, callErr)
	}
	// An answer the wire did not show (cannot happen while every message
	// passes the watch): fall back to the SDK's reading of it.
	data, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("%w: upstream %s: %v", backend.ErrMalformedResult, u.srv.Name, err)
	}
	return resultOf(data)
}

// resultOf turns a raw tools/call result into the backend's result:
// {content, structuredContent, isError}, each member as the server sent it
// and only those it sent, isError always (false when absent).
func resultOf(raw []byte) (*backend.Result, error) {
	m, err := members(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: the tools/call result: %v", backend.ErrMalformedResult, err)
	}
	isError := false
	if v, ok := m["isError"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &isError); err != nil {
			return nil, fmt.Errorf("%w: the tools/call result: isError is not a boolean", backend.ErrMalformedResult)
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
	return &backend.Result{Content: b, IsError: isError}, nil
}
