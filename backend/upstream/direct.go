package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tools/call to a stdio server is written by the gateway itself, on the
// SDK session's connection, and its answer taken from the wire before the
// SDK sees it (trackedConn.Read), when the call needs nothing the SDK's
// client adds: a first round (no input responses), and at 2026-07-28 a
// client that says what it declares (tool.CapableClient). Why:
//
//   - The request carries what the revision asks of each request: at
//     2026-07-28 the protocol version, the client's capabilities (which
//     the server must not infer from an earlier request) and the client's
//     info (a SHOULD: kept, although a Go SDK server spends about 50 us
//     of its CPU per call decoding it twice, bench/cmd/echoload), with the
//     call's progress token, log level and trace context only when it has
//     them, all written without reflection.
//   - The gateway's side skips the SDK's sending path (its params
//     encoded by reflection, its middleware, its call table); the answer
//     was already the wire's, read raw (errTakenRaw).
//
// What the SDK's call does is done here too: a request that could not be
// written was not sent (nothing ran); a call whose context ends stops
// waiting and tells the server with notifications/cancelled; the end of
// the connection ends every call waiting, as sent and unanswered.
// Requests and notifications the server sends meanwhile still go to the
// SDK (progress, log messages, a 2025-11-25 server's requests). The ids
// are strings ("backplane-call-N"), which the SDK's own (integers) never
// are.

// clientInfoMeta is clientImpl as the SDK's client writes it in a
// request's _meta (name, then version; the empty members omitted), held
// as a map of strings, which appendValue writes without reflection.
var clientInfoMeta = map[string]any{"name": clientImpl.Name, "version": clientImpl.Version}

// directSeq numbers the direct requests of every connection.
var directSeq atomic.Uint64

// appendParams appends the JSON text of a tools/call's params to dst,
// _meta first as the SDK writes them, then name and arguments: the same
// bytes as encoding/json writes (TestAppendParamsAsMarshal), the strings and objects of strings a call's _meta holds
// directly (names sorted, as encoding/json writes a map), anything else
// through encoding/json; args as they are (the connection's encoder
// compacts what is not compact, and refuses what is not JSON).
func appendParams(dst []byte, meta map[string]any, name string, args json.RawMessage) ([]byte, error) {
	dst = append(dst, '{')
	if len(meta) > 0 {
		dst = append(dst, `"_meta":`...)
		var err error
		if dst, err = appendValue(dst, meta); err != nil {
			return nil, err
		}
		dst = append(dst, ',')
	}
	dst = append(dst, `"name":`...)
	dst, err := appendValue(dst, name)
	if err != nil {
		return nil, err
	}
	dst = append(dst, `,"arguments":`...)
	dst = append(dst, args...)
	return append(dst, '}'), nil
}

func appendValue(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		if plainJSONString(v) {
			dst = append(dst, '"')
			dst = append(dst, v...)
			return append(dst, '"'), nil
		}
	case sdk.Meta:
		return appendValue(dst, map[string]any(v))
	case map[string]any:
		dst = append(dst, '{')
		// A call's _meta has a few members: their names sorted in an
		// array on the stack, not a slice grown for each.
		var names [8]string
		keys := names[:0]
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendValue(dst, k); err != nil {
				return nil, err
			}
			dst = append(dst, ':')
			if dst, err = appendValue(dst, v[k]); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, data...), nil
}

// plainJSONString reports whether s is written by encoding/json as itself
// in quotes: printable ASCII without '"', '\\' or what it escapes for
// HTML ('<', '>', '&').
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// directMeta reports whether params can be sent by callDirect on l, and
// the _meta to send: the call's own (params.Meta), with at 2026-07-28 the
// protocol version and the gateway's clientInfo. A 2026-07-28 call must carry its client's
// capabilities (Invoke puts them in params.Meta for a tool.CapableClient);
// without them it is left to the SDK, which declares its own.
func (l *link) directMeta(params *sdk.CallToolParams) (map[string]any, bool) {
	if _, raw := params.Arguments.(json.RawMessage); !raw || l.direct == nil || params.InputResponses != nil || params.RequestState != "" {
		return nil, false
	}
	if !l.modern() {
		return params.Meta, true
	}
	if _, ok := params.Meta[sdk.MetaKeyClientCapabilities]; !ok {
		return nil, false
	}
	meta := make(map[string]any, len(params.Meta)+2)
	for k, v := range params.Meta {
		meta[k] = v
	}
	meta[sdk.MetaKeyProtocolVersion] = l.protocol
	meta[sdk.MetaKeyClientInfo] = clientInfoMeta
	return meta, true
}

// callDirect writes a tools/call of name with args and meta on l's stdio
// connection and waits for its answer, which e holds once it returns nil.
func (l *link) callDirect(ctx context.Context, e *exchange, meta map[string]any, name string, args json.RawMessage) error {
	if len(args) == 0 {
		args = json.RawMessage(`{}`) // as the SDK sends no arguments
	}
	// Room for the name, the arguments and a call's usual _meta (a
	// progress token, the log level, a trace context).
	data, err := appendParams(make([]byte, 0, len(name)+len(args)+256), meta, name, args)
	if err != nil {
		return fmt.Errorf("encoding the call: %w", err)
	}
	id, _ := jsonrpc.MakeID("backplane-call-" + strconv.FormatUint(directSeq.Add(1), 10))
	e.ready = make(chan struct{})
	if err := l.wire.follow(id, e); err != nil {
		return err
	}
	if err := l.direct.Connection.Write(ctx, &jsonrpc.Request{ID: id, Method: "tools/call", Params: data}); err != nil {
		// A failed write may have left part of a line in the pipe; a
		// server cannot act on part of a line: not sent.
		return err
	}
	e.markSent()
	select {
	case <-e.ready:
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.lost
	case <-ctx.Done():
		// Best effort, as the SDK's: off the caller's return path, bounded.
		go func() {
			nctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelNotifyTimeout)
			defer stop()
			p, _ := json.Marshal(sdk.CancelledParams{Reason: ctx.Err().Error(), RequestID: id.Raw()})
			l.direct.Connection.Write(nctx, &jsonrpc.Request{Method: "notifications/cancelled", Params: p})
		}()
		return ctx.Err()
	}
}

// cancelNotifyTimeout bounds the notifications/cancelled of a direct call
// (the SDK's own bound).
const cancelNotifyTimeout = 5 * time.Second

// follow starts following e as the request id, unless the connection has
// ended.
func (w *wire) follow(id jsonrpc.ID, e *exchange) error {
	e.mu.Lock()
	e.id = id
	e.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed != nil {
		return w.closed
	}
	w.pending[id] = e
	return nil
}

// end records that the connection ended (why: err), and ends the wait of
// every direct request followed, answered by nothing.
func (w *wire) end(err error) {
	w.mu.Lock()
	if w.closed == nil {
		w.closed = err
	}
	var lost []*exchange
	for id, e := range w.pending {
		if e.ready != nil {
			lost = append(lost, e)
			delete(w.pending, id)
		}
	}
	w.mu.Unlock()
	for _, e := range lost {
		e.mu.Lock()
		if !e.done && e.lost == nil {
			e.lost = err
			close(e.ready)
		}
		e.mu.Unlock()
	}
}
