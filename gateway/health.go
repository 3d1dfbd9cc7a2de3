package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
)

// Store health as the calls see it. A store that answers reads may still
// fail every write (a full disk): a health check that only reads would say
// ok while every call fails. So the gateway remembers whether the last
// write it made to the store (a commit or a settlement) failed, and
// [Gateway.storeWriteError] reports it until a later write succeeds.

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

// storeWriteError returns the error of the gateway's last store write
// (commit or settlement) when it failed less than a minute ago, and nil
// when it succeeded, none was made, or the failure is older: /healthz
// answers 503 while it is not nil, and ok again after a quiet minute, so
// that a health-checked gateway gets calls again once the disk has room
// (and is taken out again if they still fail).
func (g *Gateway) storeWriteError() error {
	if f := g.lastWrite.Load(); f != nil && g.now().Sub(f.at) < storeFailureWindow {
		return fmt.Errorf("the last store write, at %s, failed: %w", f.at.UTC().Format(time.RFC3339), f.err)
	}
	return nil
}

// storeFailureWindow is how long a failed store write makes the gateway
// unhealthy when no write succeeds after it.
const storeFailureWindow = time.Minute

// maxUncertainCount bounds how many uncertain intents a health check
// reads to count them.
const maxUncertainCount = 1000

// SetUpstreams names where [Gateway.CheckHealth] and [Gateway.Upstreams]
// read the upstreams' states (the upstreams are connected after the
// gateway exists, by whoever built it). nil: none.
func (g *Gateway) SetUpstreams(states func() []opsview.UpstreamState) {
	if states == nil {
		g.upstreams.Store(nil)
		return
	}
	g.upstreams.Store(&states)
}

// Upstreams returns the upstreams' states, in the order SetUpstreams'
// function gives them; none when it was not called.
func (g *Gateway) Upstreams() []opsview.UpstreamState {
	if f := g.upstreams.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// CheckHealth runs the gateway's health checks, in order: the store
// answers a read, the store may serve (a store that says, as PostgreSQL
// replicas do, whether this process holds the right to), the last store
// write did not fail ([Gateway.storeWriteError]), then one check per
// upstream server ([Gateway.SetUpstreams]): it is up; and last, when the
// store answered, that no call's outcome is unknown (CheckAttention: an
// operator resolves them; a failed read of them is no check). A store
// check after a failed read is not run; the upstreams' always are. It is
// the one definition of health: /healthz answers 503 exactly when a store
// check fails ([Healthy]), /readyz also while a required upstream is down
// ([Ready]), and both they and the console's health page show the overall
// [State] of these same checks.
func (g *Gateway) CheckHealth(ctx context.Context) []opsview.HealthCheck {
	_, err := g.store.BudgetUsage(ctx)
	out := []opsview.HealthCheck{{Name: "store answers", OK: "reads succeed", Err: err}}
	if err == nil {
		if hc, ok := g.store.(store.HealthChecker); ok {
			out = append(out, opsview.HealthCheck{Name: "store may serve", OK: "this process holds the right to serve", Err: hc.Healthy(ctx)})
		}
		out = append(out, opsview.HealthCheck{Name: "store writes succeed", OK: "the last commit or settlement succeeded", Err: g.storeWriteError()})
	}
	for _, u := range g.Upstreams() {
		c := opsview.HealthCheck{Name: "upstream " + u.Name, Upstream: u.Name, Kind: opsview.CheckOptional,
			OK: fmt.Sprintf("up (restarted %d times)", u.Restarts)}
		if u.Protocol != "" {
			c.OK = fmt.Sprintf("up, MCP %s (restarted %d times)", u.Protocol, u.Restarts)
		}
		if u.Required {
			c.Kind = opsview.CheckRequired
		}
		if !u.Up {
			c.Err = u.Err
			if c.Err == nil {
				c.Err = errors.New("down")
			}
		}
		out = append(out, c)
	}
	if err == nil {
		out = append(out, g.checkUncertain(ctx)...)
	}
	return out
}

// checkUncertain is the check that no call's outcome is unknown; none
// when they cannot be read (the store's own checks say why).
func (g *Gateway) checkUncertain(ctx context.Context) []opsview.HealthCheck {
	unc, err := g.store.ListIntents(ctx, store.IntentFilter{Status: store.StatusUncertain, Limit: maxUncertainCount})
	if err != nil {
		return nil
	}
	c := opsview.HealthCheck{Name: "no uncertain calls", OK: "none", Kind: opsview.CheckAttention}
	if len(unc) > 0 {
		c.Err = fmt.Errorf("%d call(s) have an unknown outcome: resolve them (journal, status uncertain)", len(unc))
	}
	return []opsview.HealthCheck{c}
}
