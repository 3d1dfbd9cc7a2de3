package server

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store/memstore"
)

// streamingConsole stands for the web console: /ui/stream never ends on
// its own, only when Close is called.
type streamingConsole struct {
	closed atomic.Bool
	done   chan struct{}
}

func (c *streamingConsole) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(": " + r.URL.Path + "\n\n"))
	http.NewResponseController(w).Flush()
	select {
	case <-c.done:
	case <-r.Context().Done():
	}
}

func (c *streamingConsole) Close() {
	if c.closed.CompareAndSwap(false, true) {
		close(c.done)
	}
}

// The console is served under /ui, and a shutdown closes it first, so
// that its never-ending streams end and the HTTP server stops.
func TestConsoleIsMountedAndClosedOnShutdown(t *testing.T) {
	ui := &streamingConsole{done: make(chan struct{})}
	s := New(gateway.New(&gateway.Options{Store: memstore.New()}), &Options{Console: ui})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ServeHTTP(ln) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != ": /ui/events\n" {
		t.Fatalf("the console's stream: %q %v", line, err)
	}
	// With a minute to drain, only Close ends the stream early: the HTTP
	// shutdown would otherwise wait for it, then cut it off.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	if !ui.closed.Load() {
		t.Error("the console was not closed on shutdown")
	}
}
