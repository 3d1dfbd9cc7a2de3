package sqlite

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// onCaller reports whether the calling write function runs on its
// caller's goroutine (runAlone) rather than the writer's.
func onCaller() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), ".runAlone(")
}

// TestRunAlone: a lone write runs on its caller's goroutine; writes that
// arrive while it runs queue, run on the writer's goroutine after it and
// share transactions; and while the writer expects company a caller
// queues, until a transaction the writer runs alone says nobody else is
// coming.
func TestRunAlone(t *testing.T) {
	s := openDir(t, t.TempDir())
	ctx := context.Background()
	var log batchLog
	s.onBatch = log.record

	inside, release := make(chan struct{}), make(chan struct{})
	alone, held := make(chan bool, 1), make(chan error, 1)
	go func() {
		held <- s.write(ctx, func(*wtx) error {
			alone <- onCaller()
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	if !<-alone {
		t.Fatal("a lone write did not run on its caller's goroutine")
	}
	const n = 8
	onWriter := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = s.write(ctx, func(w *wtx) error {
				onWriter[i] = !onCaller()
				_, err := w.exec(`INSERT INTO pins (tool, accepted_hash, seen_hash) VALUES (?, 'h', 'h')`, fmt.Sprint("tool", i))
				return err
			})
		})
	}
	// The writer takes the first and waits for the lone transaction; the
	// others stay queued.
	for deadline := time.Now().Add(30 * time.Second); len(s.queue) < n-1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d writes queued behind the lone one", len(s.queue), n-1)
		}
	}
	close(release)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if errs[i] != nil || !onWriter[i] {
			t.Errorf("write %d, queued behind a lone one: error %v, on the writer's goroutine %v", i, errs[i], onWriter[i])
		}
	}
	tx, reqs := log.total()
	if reqs != n+1 || tx > 3 {
		t.Errorf("%d writes in %d transactions (sizes %v): the queued ones not grouped", reqs, tx, log.sizes)
	}

	// Expecting company, the writer takes the next write; once a
	// transaction it ran alone says nobody else is coming (the caller may
	// be back before the writer has said so: then once more), a caller
	// alone runs its writes itself again, every one of them.
	s.aloneOK.Store(false)
	var ran []bool
	for range 10 {
		var got bool
		if err := s.write(ctx, func(*wtx) error { got = onCaller(); return nil }); err != nil {
			t.Fatal(err)
		}
		ran = append(ran, got)
	}
	first := -1
	for i, got := range ran {
		if got && first < 0 {
			first = i
		}
		if first >= 0 && !got {
			first = -2
			break
		}
	}
	if ran[0] || first < 1 {
		t.Errorf("ten writes after the writer expected company ran on their caller: %v; want the first not, then from some point all", ran)
	}
}

// TestSettleFailingAfterItsFirstWrite: a settlement runs without a
// savepoint, so a failure after its settlement row is written (here a
// trigger refusing the open row's delete, with a constraint error, the
// kind a lone request's refusal has) must undo the transaction rather
// than commit half a settlement: the intent stays started, unsettled.
func TestSettleFailingAfterItsFirstWrite(t *testing.T) {
	s := openDir(t, t.TempDir())
	ctx := context.Background()
	if _, err := s.CommitIntent(ctx, intentReq("a", "alice")); err != nil {
		t.Fatal(err)
	}
	if err := s.write(ctx, func(w *wtx) error {
		return w.execErr(`CREATE TEMP TRIGGER refuse_close BEFORE DELETE ON open_intents BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
	}); err != nil {
		t.Fatal(err)
	}
	err := s.Settle(ctx, "a", store.Settlement{Status: store.StatusSucceeded, At: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("Settle with the open row's delete refused: %v, want that error", err)
	}
	var broken *txBroken
	if errors.As(err, &broken) {
		t.Errorf("the caller sees the internal txBroken: %v", err)
	}
	in, err := s.GetIntent(ctx, "a")
	if err != nil || in.Status != store.StatusStarted {
		t.Fatalf("after the failed settlement: %+v, %v; want started", in, err)
	}
	if err := s.write(ctx, func(w *wtx) error { return w.execErr(`DROP TRIGGER temp.refuse_close`) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, "a", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); err != nil {
		t.Fatalf("Settle once the trigger is gone: %v", err)
	}
	if in, err := s.GetIntent(ctx, "a"); err != nil || in.Status != store.StatusSucceeded {
		t.Fatalf("after settling: %+v, %v; want succeeded", in, err)
	}
}
