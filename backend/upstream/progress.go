package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultProgressEvery is how often Options.StartProgress is called while
// a server starts.
const DefaultProgressEvery = 5 * time.Second

// startProgress calls report every every (DefaultProgressEvery when not
// positive) with the time waited, until the returned stop is called; stop
// returns once no call of report is running or will start. A nil report
// makes it do nothing.
func startProgress(report func(waited time.Duration), every time.Duration) (stop func()) {
	if report == nil {
		return func() {}
	}
	if every <= 0 {
		every = DefaultProgressEvery
	}
	began := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				select {
				case <-done: // stopped meanwhile: say nothing more
					return
				default:
				}
				report(time.Since(began).Round(time.Second))
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// ErrStartTimeout is wrapped by the error of a Connect that ran out of
// Options.ConnectTimeout.
var ErrStartTimeout = errors.New("the server did not start within the connect timeout")

// startTimedOut returns err, wrapping ErrStartTimeout (and saying how long
// was allowed) when the connect timeout, not the caller's ctx, ended the
// start.
func (u *Upstream) startTimedOut(ctx, cctx context.Context, err error) error {
	if ctx.Err() != nil || !errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w (%v; a first download may need a longer connect_timeout): %v", ErrStartTimeout, u.connTO, err)
}
