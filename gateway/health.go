package gateway

import (
	"fmt"
	"time"
)

// Store health as the calls see it. A store that answers reads may still
// fail every write (a full disk): a health check that only reads would say
// ok while every call fails. So the gateway remembers whether the last
// write it made to the store (a commit or a settlement) failed, and
// [Gateway.StoreWriteError] reports it until a later write succeeds.

// writeFailure is the last failed store write.
type writeFailure struct {
	err error
	at  time.Time
}

// noteStoreWrite records the outcome of a store write; a cancelled call's
// refusal is no evidence either way and is not recorded.
func (g *Gateway) noteStoreWrite(err error) {
	if err == nil {
		if g.lastWrite.Load() != nil {
			g.lastWrite.Store(nil)
		}
		return
	}
	g.lastWrite.Store(&writeFailure{err: err, at: g.now()})
}

// StoreWriteError returns the error of the gateway's last store write
// (commit or settlement) when it failed less than a minute ago, and nil
// when it succeeded, none was made, or the failure is older: /healthz
// answers 503 while it is not nil, and ok again after a quiet minute, so
// that a health-checked gateway gets calls again once the disk has room
// (and is taken out again if they still fail).
func (g *Gateway) StoreWriteError() error {
	if f := g.lastWrite.Load(); f != nil && g.now().Sub(f.at) < storeFailureWindow {
		return fmt.Errorf("the last store write, at %s, failed: %w", f.at.UTC().Format(time.RFC3339), f.err)
	}
	return nil
}

// storeFailureWindow is how long a failed store write makes the gateway
// unhealthy when no write succeeds after it.
const storeFailureWindow = time.Minute
