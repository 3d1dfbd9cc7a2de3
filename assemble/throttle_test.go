package assemble

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/agentbackplane/backplane/internal/auththrottle"
)

// TestOpenServerCountsWrongTokensOnce: /mcp, /metrics and the console
// share one count of wrong tokens (issue 23): guesses spread over them are
// counted together, so the console refuses, unchecked, a token whose start
// failed too often at /mcp, and /metrics one whose start failed at the
// console.
func TestOpenServerCountsWrongTokensOnce(t *testing.T) {
	const opToken = "bp_operator_0123456789abcdefghijklmnopqrstuvwxyz"
	cfg := writeConfig(t, "policy:\n  - caller: alice\n    allow: [read]\n"+
		"operators:\n  - name: ops\n    token: "+opToken+"\n"+
		"serve:\n  http: 127.0.0.1:0\n  tokens: {\"alice-token\": alice}\n")
	s, err := OpenServer(context.Background(), cfg, &ServeOptions{Open: &Options{Stderr: io.Discard}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	do := func(method, p, token string) int {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL()+p, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if code := do("GET", "/ui/api/health", opToken); code != http.StatusOK {
		t.Fatalf("the console with the operator's token: %d, want 200", code)
	}
	// Guesses as long as the token, with its first half (what the count
	// is keyed by).
	half := opToken[:len(opToken)/2]
	for i := range auththrottle.Failures {
		if code := do("POST", "/mcp", fmt.Sprintf("%s%0*d", half, len(opToken)-len(half), i)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d at /mcp: %d, want 401", i, code)
		}
	}
	if code := do("GET", "/ui/api/health", opToken); code != http.StatusTooManyRequests {
		t.Errorf("the console after %d guesses at /mcp that start like the operator's token: %d, want 429 (one count)", auththrottle.Failures, code)
	}
	if code := do("GET", "/metrics", opToken); code != http.StatusTooManyRequests {
		t.Errorf("/metrics after them: %d, want 429", code)
	}
}
