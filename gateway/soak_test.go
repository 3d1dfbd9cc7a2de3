package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// TestSoakRetention (BACKPLANE_SOAK=1) runs a million calls (or
// BACKPLANE_SOAK_CALLS) through the gateway on the SQLite store, spread
// over ten hours of simulated time (a clock advanced by each call), with
// a windowed budget (per minute) and retention of one hour, pruned every
// ten simulated minutes as serve does. After the first hours, the
// database (file and WAL) and the process's RSS stay flat: what is
// written in an hour is what is pruned.
func TestSoakRetention(t *testing.T) {
	if os.Getenv("BACKPLANE_SOAK") != "1" {
		t.Skip("a soak of a million calls; set BACKPLANE_SOAK=1 to run it")
	}
	calls := 1_000_000
	if s := os.Getenv("BACKPLANE_SOAK_CALLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10_000 {
			t.Fatalf("BACKPLANE_SOAK_CALLS=%q: want an integer >= 10000", s)
		}
		calls = n
	}
	const (
		hours   = 10
		keep    = time.Hour
		every   = 10 * time.Minute
		workers = 32
	)
	step := hours * time.Hour / time.Duration(calls) // simulated time per call
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var ticks atomic.Int64 // calls started
	now := func() time.Time { return base.Add(time.Duration(ticks.Load()) * step) }

	dir := t.TempDir()
	st, err := sqlite.Open(dir, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rules, err := policy.NewRules([]policy.Rule{
		{Caller: "agent-0", Allow: []string{"note"}}, {Caller: "agent-1", Allow: []string{"note"}},
		{Caller: "agent-2", Allow: []string{"note"}}, {Caller: "agent-3", Allow: []string{"note"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{
		Store: st, Policy: rules, Now: now,
		Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1 << 40, Per: time.Minute}},
	})
	if err := g.Register(context.Background(), tool.Tool{Name: "note", Description: "soak", InputSchema: json.RawMessage(noteSchema),
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
		})}); err != nil {
		t.Fatal(err)
	}

	type sample struct {
		hour                      int
		dbBytes, walBytes, rssKiB int64
		pruned                    int64
		wall                      time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
		pruned  int64
	)
	start := time.Now()
	// The pruner: as serve's, but on simulated time, so it runs every ten
	// simulated minutes; it also samples sizes at each simulated hour.
	done := make(chan struct{})
	pruning := make(chan struct{})
	go func() {
		defer close(pruning)
		next, hour := base.Add(every), 1
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			n := now()
			if n.Before(next) {
				continue
			}
			next = n.Truncate(every).Add(every)
			r, err := g.Prune(context.Background(), n.Add(-keep), "soak")
			if err != nil {
				t.Errorf("prune: %v", err)
				return
			}
			mu.Lock()
			pruned += r.Intents
			if !n.Before(base.Add(time.Duration(hour) * time.Hour)) {
				runtime.GC()
				samples = append(samples, sample{hour: hour, dbBytes: size(filepath.Join(dir, sqlite.DBFile)),
					walBytes: size(filepath.Join(dir, sqlite.DBFile+"-wal")), rssKiB: rss(), pruned: pruned, wall: time.Since(start)})
				hour = int(n.Sub(base)/time.Hour) + 1
			}
			mu.Unlock()
		}
	}()

	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range workers {
		wg.Go(func() {
			caller := fmt.Sprintf("agent-%d", w%4)
			for {
				i := ticks.Add(1)
				if i > int64(calls) {
					return
				}
				_, err := g.Call(context.Background(), gateway.CallRequest{Caller: caller, Tool: "note",
					Arguments: json.RawMessage(`{"text":"soak ` + strconv.FormatInt(i, 10) + `"}`)})
				if err != nil && failed.Add(1) < 5 {
					t.Errorf("call %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	close(done)
	<-pruning
	elapsed := time.Since(start)
	if failed.Load() > 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}

	t.Logf("%d calls in %v (%.0f calls/s), %v of simulated time per call, retention %v pruned every %v",
		calls, elapsed.Round(time.Second), float64(calls)/elapsed.Seconds(), step, keep, every)
	t.Logf("%-5s %12s %12s %10s %12s %10s", "hour", "db bytes", "wal bytes", "rss MiB", "pruned", "wall")
	for _, s := range samples {
		t.Logf("%-5d %12d %12d %10.1f %12d %10v", s.hour, s.dbBytes, s.walBytes, float64(s.rssKiB)/1024, s.pruned, s.wall.Round(time.Second))
	}
	if len(samples) < hours-1 {
		t.Fatalf("%d hourly samples, want %d", len(samples), hours-1)
	}
	// Flat after the first hours: the hour 3 figure is what an hour of
	// calls plus the retention keeps; later hours may not grow past half as
	// much again (free pages are reused, then returned by incremental
	// vacuum).
	ref := samples[2]
	for _, s := range samples[3:] {
		if s.dbBytes > ref.dbBytes*3/2 {
			t.Errorf("hour %d: database %d bytes, more than 1.5x hour %d's %d: it grows", s.hour, s.dbBytes, ref.hour, ref.dbBytes)
		}
		if s.rssKiB > ref.rssKiB*3/2+16*1024 {
			t.Errorf("hour %d: RSS %d KiB, more than 1.5x hour %d's %d (+16 MiB): it grows", s.hour, s.rssKiB, ref.hour, ref.rssKiB)
		}
	}
	left, cursor := 0, ""
	for {
		p, err := st.PageIntents(context.Background(), store.IntentFilter{Limit: 1000}, cursor)
		if err != nil {
			t.Fatal(err)
		}
		left += len(p.Intents)
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	t.Logf("intents left in the journal: %d (one hour to one hour and ten minutes of calls: %d to %d)", left, int(time.Hour/step), int(70*time.Minute/step))
}

func size(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// rss is the process's resident set in KiB (Linux); 0 elsewhere.
func rss() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
