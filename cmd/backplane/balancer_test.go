package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The balancer tests put three `backplane serve` replicas on one
// PostgreSQL schema behind a real HAProxy (Debian's package, started by the
// test on loopback), as docs/deploy.md tells teams to run them. A
// 2025-11-25 session lives in the memory of the replica that opened it, so
// behind a balancer it needs affinity: HAProxy sticks each request to the
// replica that answered with its Mcp-Session-Id.

// balancer is one HAProxy process in front of the replicas.
type balancer struct {
	base   string // http://127.0.0.1:PORT
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

// replicaHeader names the response header HAProxy sets to the replica
// that answered, so a test sees where each request went.
const replicaHeader = "X-Backplane-Replica"

// startBalancer starts HAProxy balancing round-robin over the replicas,
// per request (not per connection: HAProxy chooses a server for every
// request of a kept-alive client connection). With affinity, requests
// carrying an Mcp-Session-Id go to the replica whose response carried it.
// It skips the test, saying why, where haproxy is not installed.
func startBalancer(t *testing.T, reps []*replica, affinity bool) *balancer {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (scripts/test installs Debian's package where it may): " + err.Error())
	}
	var servers strings.Builder
	for _, r := range reps {
		fmt.Fprintf(&servers, "  server %s %s\n", r.name, strings.TrimPrefix(r.base, "http://"))
	}
	stick := ""
	if affinity {
		stick = `  stick-table type string len 128 size 10k expire 30m
  stick on req.hdr(mcp-session-id)
  stick store-response res.hdr(mcp-session-id)
`
	}
	// HAProxy cannot listen on port 0 and say which it got: take a free
	// port, close it, and try again with another if HAProxy loses it.
	for attempt := 0; attempt < 5; attempt++ {
		addr := freePort(t)
		cfg := fmt.Sprintf(`global
  maxconn 2000
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
frontend mcp
  bind %s
  default_backend replicas
backend replicas
  balance roundrobin
  http-response set-header %s %%[srv_name]
%s%s`, addr, replicaHeader, stick, servers.String())
		path := filepath.Join(t.TempDir(), "haproxy.cfg")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		// -db: stay in the foreground, no daemon; -W is not needed.
		cmd := exec.Command(bin, "-db", "-f", path)
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		b := &balancer{base: "http://" + addr, cmd: cmd, stderr: &stderr}
		up := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !up; {
			select {
			case <-exited:
				deadline = time.Time{}
			default:
				if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					c.Close()
					up = true
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
		if up {
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
				if t.Failed() {
					t.Logf("haproxy:\n%s", stderr.String())
				}
			})
			return b
		}
		cmd.Process.Kill()
		t.Logf("haproxy did not listen on %s (attempt %d):\n%s", addr, attempt+1, stderr.String())
	}
	t.Fatal("haproxy did not start in 5 attempts")
	return nil
}

// rawMCP posts one JSON-RPC message to the balancer at 2025-11-25, as the
// caller of alice-token, in the session named (none for initialize), and
// returns the status, the replica that answered and the session id the
// response names.
func (b *balancer) rawMCP(t *testing.T, session, body string) (status int, replica, sessionID string, text string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/mcp: %v", b.base, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header.Get(replicaHeader), resp.Header.Get("Mcp-Session-Id"), string(raw)
}

const balancerInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"balancer-test","version":"v0"}}}`

// openRawSession initializes a 2025-11-25 session through the balancer and
// sends notifications/initialized (which lands wherever the balancer puts
// it); it returns the session id and the replica that opened it.
func (b *balancer) openRawSession(t *testing.T) (string, string) {
	t.Helper()
	code, rep, sid, text := b.rawMCP(t, "", balancerInitialize)
	if code != http.StatusOK || sid == "" || rep == "" {
		t.Fatalf("initialize through the balancer: %d, replica %q, session %q: %s", code, rep, sid, text)
	}
	return sid, rep
}

// TestBalancerSessionsNeedAffinity: a 2025-11-25 session opened through a
// round-robin balancer without affinity is unknown to the other replicas
// (404, as the revision says for an unknown session); with HAProxy's stick
// table on Mcp-Session-Id, every request of the session reaches the
// replica that opened it, while new sessions are still spread over all
// three. This is the configuration docs/deploy.md gives.
func TestBalancerSessionsNeedAffinity(t *testing.T) {
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 15s}", `policy:
  - caller: alice
    allow: [note]
tools:
`+noteTool))
	reps := startReplicas(t, g, "A", "B", "C")
	list := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id)
	}

	t.Run("round-robin", func(t *testing.T) {
		b := startBalancer(t, reps, false)
		sid, opened := b.openRawSession(t)
		notFound := 0
		for i := 0; i < 6; i++ {
			code, rep, _, text := b.rawMCP(t, sid, list(i+2))
			switch {
			case rep == opened && code == http.StatusOK:
			case rep != opened && code == http.StatusNotFound:
				notFound++
			default:
				t.Errorf("tools/list %d answered %d by %s (the session is %s's): %s", i, code, rep, opened, text)
			}
		}
		if notFound == 0 {
			t.Errorf("no request of the session reached another replica: round-robin did not spread them")
		}
	})

	t.Run("affinity", func(t *testing.T) {
		b := startBalancer(t, reps, true)
		openedBy := map[string]int{}
		for s := 0; s < 6; s++ {
			sid, opened := b.openRawSession(t)
			openedBy[opened]++
			for i := 0; i < 4; i++ {
				code, rep, _, text := b.rawMCP(t, sid, list(i+2))
				if code != http.StatusOK || rep != opened || !strings.Contains(text, `"note"`) {
					t.Errorf("session %d, tools/list %d: %d by %s (the session is %s's): %s", s, i, code, rep, opened, text)
				}
			}
		}
		if len(openedBy) < 2 {
			t.Errorf("six sessions were opened by %v: the balancer did not spread new sessions", openedBy)
		}
	})
}

// TestBalancerQuotaAcrossThreeReplicas: 64 concurrent calls from 8 client
// sessions (the Go SDK's client at 2025-11-25, each kept on its replica by
// the stick table) spread over three replicas spend one quota of 20 exactly once.
func TestBalancerQuotaAcrossThreeReplicas(t *testing.T) {
	const quota, sessions, perSession = 20, 8, 8
	g, b := quotaReplicas(t, quota, true)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Each session's HTTP client records which replica answered it.
	seen := &replicaSeen{by: map[string]int{}}
	var css []*mcp.ClientSession
	for range sessions {
		client := mcp.NewClient(&mcp.Implementation{Name: "balancer-test", Version: "v0"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:   b.base + "/mcp",
			HTTPClient: &http.Client{Transport: seen.wrap(tokenTransport("alice-token"))},
		}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatalf("connect through the balancer: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		css = append(css, cs)
	}
	spendQuota(ctx, t, g, css, perSession, quota, seen)
	if n := len(seen.snapshot()); n < 2 {
		t.Errorf("the sessions' requests reached %d replica(s), want them spread", n)
	}
	j := g.pgJournal(t, "--limit", "1000")
	if len(j) != quota {
		t.Errorf("the journal holds %d intents, want %d", len(j), quota)
	}
}

// quotaReplicas starts three replicas on a new PostgreSQL schema whose
// policy allows alice the note tool under one caller quota, behind HAProxy
// (with or without the stick table).
func quotaReplicas(t *testing.T, quota int, affinity bool) (*gwDir, *balancer) {
	t.Helper()
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 15s, max_conns: 16}", fmt.Sprintf(`policy:
  - caller: alice
    allow: [note]
budgets:
  - scope: caller
    quota: %d
tools:
%s`, quota, noteTool)))
	return g, startBalancer(t, startReplicas(t, g, "A", "B", "C"), affinity)
}

// spendQuota makes perSession concurrent note calls on each session, all
// at once, and checks that exactly quota of them ran: the rest refused
// with budget_exceeded, none failing otherwise, the tool run once per
// success.
func spendQuota(ctx context.Context, t *testing.T, g *gwDir, css []*mcp.ClientSession, perSession, quota int, seen *replicaSeen) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	succeeded, refused := 0, 0
	start := make(chan struct{})
	for i, cs := range css {
		for k := range perSession {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				n := i*perSession + k + 1
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"n": n}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("call n=%d: %v", n, err)
				case errorClass(res) == "":
					succeeded++
				case errorClass(res) == "budget_exceeded":
					refused++
				default:
					t.Errorf("call n=%d: class %s, want a success or budget_exceeded", n, errorClass(res))
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	total := len(css) * perSession
	t.Logf("%d calls: %d succeeded, %d budget_exceeded; requests answered per replica: %v", total, succeeded, refused, seen.snapshot())
	if succeeded != quota || refused != total-quota {
		t.Errorf("%d succeeded and %d were refused; want exactly %d and %d", succeeded, refused, quota, total-quota)
	}
	if got := len(g.recordedNotes(t)); got != quota {
		t.Errorf("the tool ran %d times, want %d", got, quota)
	}
}

// replicaSeen counts the responses per replica, from the balancer's header.
type replicaSeen struct {
	mu sync.Mutex
	by map[string]int
}

func (s *replicaSeen) wrap(base http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(r)
		if err == nil {
			if rep := resp.Header.Get(replicaHeader); rep != "" {
				s.mu.Lock()
				s.by[rep]++
				s.mu.Unlock()
			}
		}
		return resp, err
	})
}

func (s *replicaSeen) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.by))
	for k, v := range s.by {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
