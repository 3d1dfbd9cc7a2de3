package assemble

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store/memstore"
)

// TestLateUpstreamNow: a server that failed at start is retried with
// backoff; now makes its retry try at once instead of at the end of the
// backoff (the console's login saved what it lacked).
func TestLateUpstreamNow(t *testing.T) {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		http.Error(w, "not yet", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	l := newLateUpstreams()
	defer l.Close()
	l.now("remote") // nothing waiting: no effect, no block
	l.retry(config.ServerConfig{Name: "remote"}, upstream.Server{Name: "remote", URL: srv.URL + "/mcp"},
		&upstream.Options{Registry: gateway.New(&gateway.Options{Store: memstore.New()}), ConnectTimeout: 2 * time.Second}, nil, slog.New(slog.DiscardHandler))
	waitFor := func(n int32, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if attempts.Load() >= n {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	if !waitFor(1, 10*time.Second) {
		t.Fatalf("the first retry never came: %v", l.failure("remote"))
	}
	// One attempt may make more than one request: let it end. The next
	// retry is 2s after it; now brings it forward.
	time.Sleep(300 * time.Millisecond)
	first := attempts.Load()
	l.now("remote")
	if !waitFor(first+1, time.Second) {
		t.Fatalf("now did not bring the retry forward (%d attempts)", attempts.Load())
	}
	if l.failure("remote") == nil {
		t.Error("the server is not recorded as failing")
	}
}
