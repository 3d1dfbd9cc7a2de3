package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestOnlyTheOwnersResumptionCounts: a GET with Last-Event-ID brings back
// a dropped call's client only when it is made by the caller that opened
// the session (another caller who learnt the session id must not keep
// the call alive, and so let it consume an approval), and only a GET with
// Last-Event-ID does (not the session's other requests).
func TestOnlyTheOwnersResumptionCounts(t *testing.T) {
	s := &Server{}
	s.sess = sessions{byID: map[string]*sessionEntry{"S1": {caller: "alice"}}, pending: map[string]int{}, converted: map[string]int{}}
	s.openSessions.Store("S1", struct{}{})
	w := &resumeWaiter{resumed: make(chan context.Context, 1)}
	defer s.awaitResume("S1", w)()
	h := s.trackRequests(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func(method, caller, lastEventID string) bool {
		r := httptest.NewRequest(method, "/mcp", nil)
		r.Header.Set("Mcp-Session-Id", "S1")
		if lastEventID != "" {
			r.Header.Set("Last-Event-ID", lastEventID)
		}
		r = r.WithContext(context.WithValue(r.Context(), identKey{}, ident{caller: caller}))
		h.ServeHTTP(httptest.NewRecorder(), r)
		select {
		case <-w.resumed:
			return true
		default:
			return false
		}
	}
	if send(http.MethodGet, "bob", "S1_0_1") {
		t.Error("bob's GET with Last-Event-ID on alice's session counted as her resumption")
	}
	if send(http.MethodGet, "alice", "") {
		t.Error("a GET without Last-Event-ID (a standalone stream) counted as a resumption")
	}
	if send(http.MethodPost, "alice", "") {
		t.Error("a POST counted as a resumption")
	}
	if !send(http.MethodGet, "alice", "S1_0_1") {
		t.Error("alice's GET with Last-Event-ID did not count as her resumption")
	}
}
