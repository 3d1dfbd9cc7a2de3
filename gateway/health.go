package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Kind says what a failure of the check means: the gateway cannot
	// serve (CheckStore, the zero value), is not ready (CheckRequired),
	// or serves degraded (CheckOptional).
	Kind CheckKind
	// Upstream names the upstream server the check is about ("" for
	// the store's checks).
	Upstream string
}

// CheckKind is what a failed [HealthCheck] means.
type CheckKind int

const (
	// CheckStore: a failure means the gateway cannot serve any call (the
	// store): /healthz (liveness) and /readyz answer 503.
	CheckStore CheckKind = iota
	// CheckRequired: a failure means a server marked required is down:
	// the gateway is alive but not ready (/readyz answers 503).
	CheckRequired
	// CheckOptional: a failure means the gateway serves degraded (an
	// upstream's tools fail, the others work): both answer 200 and say so.
	CheckOptional
	// CheckAttention: a failure means an operator has something to do
	// (calls whose outcome is unknown wait to be resolved): the gateway
	// serves, and says degraded, as for CheckOptional.
	CheckAttention
)

// maxUncertainCount bounds how many uncertain intents a health check
// reads to count them.
const maxUncertainCount = 1000

// Health states of a set of checks ([State]), worst last.
const (
	StateOK       = "ok"
	StateDegraded = "degraded"  // an optional check failed
	StateNotReady = "not_ready" // a required upstream is down
	StateFailing  = "failing"   // a store check failed
)

// UpstreamState is the state of one upstream MCP server, for health.
type UpstreamState struct {
	Name     string
	Required bool // serve.servers[].required
	Up       bool
	// Restarts counts the reconnections after the server went down.
	Restarts int
	// Err says why the server is down (nil while up).
	Err error
	// Protocol is the MCP revision the connection speaks ("" unknown, or
	// down): 2026-07-28 where the server offers it, else 2025-11-25.
	Protocol string
	// Phase says more than Up: "up"; "starting" (never connected: its
	// first connection failed at start and is retried in the background);
	// "restarting" (it was up, went down, and is reconnected with
	// backoff); "" when the source does not say.
	Phase string
}

// SetUpstreams names where [Gateway.CheckHealth] and [Gateway.Upstreams]
// read the upstreams' states (the upstreams are connected after the
// gateway exists, by whoever built it). nil: none.
func (g *Gateway) SetUpstreams(states func() []UpstreamState) {
	if states == nil {
		g.upstreams.Store(nil)
		return
	}
	g.upstreams.Store(&states)
}

// Upstreams returns the upstreams' states, in the order SetUpstreams'
// function gives them; none when it was not called.
func (g *Gateway) Upstreams() []UpstreamState {
	if f := g.upstreams.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// CheckHealth runs the gateway's health checks, in order: the store
// answers a read, the store may serve (a store that says, as PostgreSQL
// replicas do, whether this process holds the right to), the last store
// write did not fail ([Gateway.StoreWriteError]), then one check per
// upstream server ([Gateway.SetUpstreams]): it is up; and last, when the
// store answered, that no call's outcome is unknown (CheckAttention: an
// operator resolves them; a failed read of them is no check). A store
// check after a failed read is not run; the upstreams' always are. It is
// the one definition of health: /healthz answers 503 exactly when a store
// check fails ([Healthy]), /readyz also while a required upstream is down
// ([Ready]), and both they and the console's health page show the overall
// [State] of these same checks.
func (g *Gateway) CheckHealth(ctx context.Context) []HealthCheck {
	_, err := g.store.BudgetUsage(ctx)
	out := []HealthCheck{{Name: "store answers", OK: "reads succeed", Err: err}}
	if err == nil {
		if hc, ok := g.store.(store.HealthChecker); ok {
			out = append(out, HealthCheck{Name: "store may serve", OK: "this process holds the right to serve", Err: hc.Healthy(ctx)})
		}
		out = append(out, HealthCheck{Name: "store writes succeed", OK: "the last commit or settlement succeeded", Err: g.StoreWriteError()})
	}
	for _, u := range g.Upstreams() {
		c := HealthCheck{Name: "upstream " + u.Name, Upstream: u.Name, Kind: CheckOptional,
			OK: fmt.Sprintf("up (restarted %d times)", u.Restarts)}
		if u.Protocol != "" {
			c.OK = fmt.Sprintf("up, MCP %s (restarted %d times)", u.Protocol, u.Restarts)
		}
		if u.Required {
			c.Kind = CheckRequired
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
func (g *Gateway) checkUncertain(ctx context.Context) []HealthCheck {
	unc, err := g.store.ListIntents(ctx, store.IntentFilter{Status: store.StatusUncertain, Limit: maxUncertainCount})
	if err != nil {
		return nil
	}
	c := HealthCheck{Name: "no uncertain calls", OK: "none", Kind: CheckAttention}
	if len(unc) > 0 {
		c.Err = fmt.Errorf("%d call(s) have an unknown outcome: resolve them (journal, status uncertain)", len(unc))
	}
	return []HealthCheck{c}
}

// Healthy returns the first failed store check's error, nil when they all
// passed: whether the gateway is alive (/healthz). An upstream that is
// down does not make it unhealthy.
func Healthy(checks []HealthCheck) error {
	return firstFailed(checks, CheckStore)
}

// Ready returns the first failed store or required-upstream check's
// error, nil when none failed: whether the gateway is ready (/readyz).
func Ready(checks []HealthCheck) error {
	return firstFailed(checks, CheckStore, CheckRequired)
}

func firstFailed(checks []HealthCheck, kinds ...CheckKind) error {
	for _, c := range checks {
		if c.Err != nil && slices.Contains(kinds, c.Kind) {
			return fmt.Errorf("%s: %w", c.Name, c.Err)
		}
	}
	return nil
}

// State is the overall state of checks: the worst of their failures
// (StateFailing, StateNotReady, StateDegraded), StateOK when none failed.
func State(checks []HealthCheck) string {
	worst := StateOK
	rank := map[string]int{StateOK: 0, StateDegraded: 1, StateNotReady: 2, StateFailing: 3}
	for _, c := range checks {
		if c.Err == nil {
			continue
		}
		s := CheckState(c)
		if rank[s] > rank[worst] {
			worst = s
		}
	}
	return worst
}

// CheckState is the state one check puts the gateway in: StateOK when it
// passed, else what its Kind says.
func CheckState(c HealthCheck) string {
	switch {
	case c.Err == nil:
		return StateOK
	case c.Kind == CheckRequired:
		return StateNotReady
	case c.Kind == CheckOptional, c.Kind == CheckAttention:
		return StateDegraded
	}
	return StateFailing
}
