package testkit

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingTB is t with its cleanups kept for the test to run, and its
// errors recorded instead of failing t.
type recordingTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	errors   []string
}

func (r *recordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestPostgresSchemaCleanupBounded: the cleanup of a schema in a database
// that accepts connections and never answers gives up after dropTimeout,
// failing the test with the schema's name, instead of hanging.
func TestPostgresSchemaCleanupBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn // held open, never answered
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Setenv(PostgresURLEnv, "postgres://postgres@"+ln.Addr().String()+"/test?sslmode=disable")
	defer func(d time.Duration) { dropTimeout = d }(dropTimeout)
	dropTimeout = 200 * time.Millisecond

	rec := &recordingTB{TB: t}
	_, schema := PostgresSchema(rec)
	if len(rec.cleanups) != 1 {
		t.Fatalf("%d cleanups registered, want 1", len(rec.cleanups))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec.cleanups[0]()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the cleanup of a schema in a database that does not answer still runs after 20s")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], schema) || !strings.Contains(rec.errors[0], "left behind") {
		t.Errorf("errors %q: want one naming schema %s, left behind", rec.errors, schema)
	}
}
