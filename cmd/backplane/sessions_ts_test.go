package main

import (
	"regexp"
	"strconv"
	"testing"
)

// TestSessionTypeScriptClientsAreNeverLockedOut: the official TypeScript
// SDK client ends with client.close(), which closes its transport without
// ending the HTTP session (no DELETE). Twenty such short runs, one after
// the other, by one caller, through `backplane serve` at the default cap
// of 16 sessions: every run connects and its call succeeds (the oldest
// idle sessions are closed to make room, and counted), where the 17th
// used to get 429 for up to 30 minutes (issue 26, item 1).
func TestSessionTypeScriptClientsAreNeverLockedOut(t *testing.T) {
	g := newServeDir(t)
	tsClient(t) // skips, saying why, without node or the SDK
	p := startServe(t, g)
	const runs = 20
	for i := range runs {
		rep, stderr := runTSClient(t, g, `{"calls":[{"name":"read","arguments":{"path":"notes.txt"}}]}`,
			"--http", p.base+"/mcp", "--token", "alice-token")
		if rep.ConnectError != nil {
			t.Fatalf("run %d: connect: %+v\n%s\n%s", i+1, rep.ConnectError, stderr, p.log())
		}
		if len(rep.Calls) != 1 || rep.Calls[0].Result == nil || rep.Calls[0].Result.IsError {
			t.Fatalf("run %d: call %+v", i+1, rep.Calls)
		}
	}
	code, body := httpGet(t, p.base+"/metrics", "ops-token")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	metric := func(name string) int {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	open := metric(`backplane_mcp_sessions_open{caller="alice"}`)
	evicted := metric(`backplane_mcp_sessions_evicted_total{caller="alice"}`)
	// Each run left one session: what is open and what was closed to
	// make room add up to the runs, and the cap held.
	if open < 1 || open > 16 || evicted < runs-16 || open+evicted != runs {
		t.Errorf("sessions open %d, closed to make room %d; want at most 16 open, the sum %d", open, evicted, runs)
	}
	if n := len(regexp.MustCompile(`idle session closed to make room`).FindAllString(p.log(), -1)); n != evicted {
		t.Errorf("%d log lines of closed sessions, want one per session closed (%d)", n, evicted)
	}
}
