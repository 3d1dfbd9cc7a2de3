package opsview

import (
	"fmt"
	"slices"
)

// HealthCheck is one check of gateway.Gateway.CheckHealth: what was checked, and
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
