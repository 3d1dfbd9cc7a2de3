package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/tool"
)

// notifications/tools/list_changed goes to each session whose visible
// catalog changed since it last listed: at each tools/list the server
// records the caller and a digest of the tools it may see; at each change
// of the gateway's catalog the digests are computed again.
//
// The SDK sends list_changed only to every session at once, when a tool of
// its own server changes. So the server (re)adds an inert tool of its own
// (never listed nor called: the middleware answers tools/list and
// tools/call from the gateway) to make the SDK send it, and a sending
// middleware lets it through only to the sessions chosen.

const changeSentinel = "backplane.catalog-changed"

// listChanges is the server's list_changed state.
type listChanges struct {
	views   sync.Map // *mcp.ServerSession -> *view
	due     sync.Map // *mcp.ServerSession -> struct{}: to be sent the next list_changed
	pending atomic.Bool
}

// view is what a session last saw.
type view struct {
	mu       sync.Mutex
	caller   string
	digest   string
	notified bool // told of a change since it last listed
	// listen: the session of a 2026-07-28 subscriptions/listen stream,
	// which lists on other requests: each change is told, and the digest
	// it was told of is the one the next change is compared with.
	listen bool
}

// catalogDigest digests the tools caller may see, with their definitions.
func (s *Server) catalogDigest(caller string) string {
	h := sha256.New()
	for _, t := range s.g.ToolsFor(caller) {
		h.Write([]byte(tool.HashOf(t)))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sawList records that ss listed the catalog as caller.
func (s *Server) sawList(ss *mcp.ServerSession, caller string) {
	if ss == nil {
		return
	}
	v := &view{caller: caller}
	got, loaded := s.changes.views.LoadOrStore(ss, v)
	if !loaded {
		go func() { // forget it when the session ends
			ss.Wait()
			s.changes.views.Delete(ss)
		}()
	}
	v = got.(*view)
	d := s.catalogDigest(caller)
	v.mu.Lock()
	v.caller, v.digest, v.notified = caller, d, false
	v.mu.Unlock()
}

// catalogChanged is the gateway's OnChange hook: it checks the views on
// another goroutine, coalescing a burst of changes (an upstream's
// re-listing registers many tools).
func (s *Server) catalogChanged() {
	if !s.changes.pending.CompareAndSwap(false, true) {
		return
	}
	go func() {
		s.changes.pending.Store(false) // a change from now on checks again
		s.notifyChangedViews()
	}()
}

// sawListen records that ss is a subscriptions/listen stream of caller
// asking for tools/list_changed: it is told of each change of what caller
// may see from now on.
func (s *Server) sawListen(ss *mcp.ServerSession, caller string) {
	s.sawList(ss, caller)
	if got, ok := s.changes.views.Load(ss); ok {
		v := got.(*view)
		v.mu.Lock()
		v.listen = true
		v.mu.Unlock()
	}
}

func (s *Server) notifyChangedViews() {
	var anyDue bool
	s.changes.views.Range(func(k, val any) bool {
		v := val.(*view)
		v.mu.Lock()
		caller, digest, notified := v.caller, v.digest, v.notified
		v.mu.Unlock()
		now := s.catalogDigest(caller)
		if notified || now == digest {
			return true
		}
		v.mu.Lock()
		if v.listen {
			v.digest = now
		} else {
			v.notified = true
		}
		v.mu.Unlock()
		s.changes.due.Store(k, struct{}{})
		anyDue = true
		return true
	})
	if !anyDue {
		return
	}
	for _, srv := range []*mcp.Server{s.stdio, s.http, s.modern} {
		srv.AddTool(&mcp.Tool{Name: changeSentinel, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{IsError: true}, nil
			})
	}
}

// listChangedFilter is the sending middleware that lets list_changed
// through only to the sessions due.
func (s *Server) listChangedFilter(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/tools/list_changed" {
			ss, _ := req.GetSession().(*mcp.ServerSession)
			if _, ok := s.changes.due.LoadAndDelete(ss); !ok {
				return nil, nil
			}
		}
		return next(ctx, method, req)
	}
}
