package server_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/agentbackplane/backplane/server"
)

// syncBuffer is a log destination written by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRefusalsDoNotFloodTheLog: finding 24 of issue 22. A caller retrying
// past its session cap (its one session in use), and requests from a refused origin, are each
// refused every time, but logged a few times a minute, not once a request.
func TestRefusalsDoNotFloodTheLog(t *testing.T) {
	f := newFixture(t)
	var logBuf syncBuffer
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}, MaxSessionsPerCaller: 1,
		Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	hs := httpServer(t, s)
	openStream(t, s, newRawSession(t, hs, "tok-alice")) // in use: never closed to make room
	const tries = 40
	for range tries {
		if code, body := rawPost(t, hs.URL, "tok-alice", nil, initializeMsg); code != http.StatusTooManyRequests {
			t.Fatalf("past the cap: %d %s, want 429", code, body)
		}
		if code, _ := rawPost(t, hs.URL, "tok-alice", map[string]string{"Origin": "http://evil.example"}, initializeMsg); code != http.StatusForbidden {
			t.Fatalf("a bad origin: %d, want 403", code)
		}
	}
	log := logBuf.String()
	sessions := strings.Count(log, "session refused")
	origins := strings.Count(log, "origin not allowed")
	if sessions == 0 || origins == 0 {
		t.Fatalf("the refusals are not logged at all:\n%s", log)
	}
	if sessions > 10 || origins > 10 {
		t.Errorf("%d refusals of each kind logged %d (sessions) and %d (origins) lines, want a few:\n%s", tries, sessions, origins, log)
	}
}
