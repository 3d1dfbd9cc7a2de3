package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/store"
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

// HealthCheck is one check of [Gateway.CheckHealth]: what was checked, and
// its error (nil when it passed).
type HealthCheck struct {
	Name string
	// OK says what a passing check means, for a health page.
	OK  string
	Err error
}

// CheckHealth runs the gateway's health checks, in order: the store
// answers a read, the store may serve (a store that says, as PostgreSQL
// replicas do, whether this process holds the right to), and the last
// store write did not fail ([Gateway.StoreWriteError]). A check after a
// failed read is not run. It is the one definition of health: /healthz
// answers 503 and the console's health page says not ok exactly when one
// of these fails ([Healthy]).
func (g *Gateway) CheckHealth(ctx context.Context) []HealthCheck {
	_, err := g.store.BudgetUsage(ctx)
	out := []HealthCheck{{Name: "store answers", OK: "reads succeed", Err: err}}
	if err != nil {
		return out
	}
	if hc, ok := g.store.(store.HealthChecker); ok {
		out = append(out, HealthCheck{Name: "store may serve", OK: "this process holds the right to serve", Err: hc.Healthy(ctx)})
	}
	return append(out, HealthCheck{Name: "store writes succeed", OK: "the last commit or settlement succeeded", Err: g.StoreWriteError()})
}

// Healthy returns the first failed check's error, nil when all passed.
func Healthy(checks []HealthCheck) error {
	for _, c := range checks {
		if c.Err != nil {
			return fmt.Errorf("%s: %w", c.Name, c.Err)
		}
	}
	return nil
}
