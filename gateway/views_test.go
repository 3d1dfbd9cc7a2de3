package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// liveGateway is a gateway over memstore with a live policy letting alice
// call flaky, whose backend fails without proof it did not run (so the
// call is uncertain); ops is the one operator.
func liveGateway(t *testing.T, audit *bytes.Buffer) (*gateway.Gateway, *policy.Live) {
	t.Helper()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"flaky"}}})
	if err != nil {
		t.Fatal(err)
	}
	live := policy.NewLive(rules)
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: live, Operators: []string{"ops"},
		Logger: slog.New(slog.NewJSONHandler(audit, nil))})
	err = g.Register(context.Background(), tool.Tool{Name: "flaky", InputSchema: json.RawMessage(`{"type":"object"}`),
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return nil, errors.New("broken pipe")
		})})
	if err != nil {
		t.Fatal(err)
	}
	return g, live
}

// An uncertain call is the health check's CheckAttention row: the state is
// degraded while /healthz and /readyz pass, and ok again once resolved.
func TestCheckHealthUncertainCalls(t *testing.T) {
	var audit bytes.Buffer
	g, _ := liveGateway(t, &audit)
	ctx := context.Background()
	attention := func() *opsview.HealthCheck {
		for _, c := range g.CheckHealth(ctx) {
			if c.Kind == opsview.CheckAttention {
				return &c
			}
		}
		return nil
	}
	if c := attention(); c == nil || c.Err != nil || opsview.State(g.CheckHealth(ctx)) != opsview.StateOK {
		t.Fatalf("before any call: %+v", c)
	}
	_, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "flaky", Arguments: json.RawMessage(`{}`)})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Class != tool.ClassUnknownOutcome {
		t.Fatalf("call: %v, want unknown_outcome", err)
	}
	checks := g.CheckHealth(ctx)
	c := attention()
	if c == nil || c.Err == nil || !strings.Contains(c.Err.Error(), "1 call(s)") {
		t.Fatalf("after an uncertain call: %+v", c)
	}
	if opsview.State(checks) != opsview.StateDegraded || opsview.Healthy(checks) != nil || opsview.Ready(checks) != nil {
		t.Errorf("state %s, healthy %v, ready %v: want degraded, both passing", opsview.State(checks), opsview.Healthy(checks), opsview.Ready(checks))
	}
	if _, err := g.ResolveIntent(ctx, ge.CallID, false, "ops", "checked"); err != nil {
		t.Fatal(err)
	}
	if c := attention(); c == nil || c.Err != nil {
		t.Errorf("after resolving: %+v", c)
	}
}

// Each refused operator action is of one kind, matched with errors.Is,
// and its cause is still matched.
func TestOperatorErrorKinds(t *testing.T) {
	var audit bytes.Buffer
	g, _ := liveGateway(t, &audit)
	ctx := context.Background()
	_, err := g.DecideApproval(ctx, "nope", gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI})
	if !errors.Is(err, gateway.ErrActionNotFound) || !errors.Is(err, store.ErrNotFound) || errors.Is(err, gateway.ErrActionForbidden) {
		t.Errorf("an unknown request: %v", err)
	}
	_, err = g.ResolveIntent(ctx, "call-x", true, "mallory", "")
	if !errors.Is(err, gateway.ErrActionForbidden) || !errors.Is(err, gateway.ErrNotOperator) {
		t.Errorf("not an operator: %v", err)
	}
	_, err = g.ResetBudget(ctx, "planet", "x", "ops")
	if !errors.Is(err, gateway.ErrActionInvalid) || !errors.Is(err, gateway.ErrBadBudgetReset) {
		t.Errorf("a bad scope: %v", err)
	}
	_, err = g.AcceptDefinition(ctx, "flaky", "ops", "")
	if !errors.Is(err, gateway.ErrActionConflict) || !errors.Is(err, gateway.ErrNotPinned) {
		t.Errorf("accepting a tool that is not pinned: %v", err)
	}
}

// ReloadPolicy swaps the live policy and audits each reload; a refused
// one keeps the running policy.
func TestReloadPolicy(t *testing.T) {
	var audit bytes.Buffer
	g, live := liveGateway(t, &audit)
	ctx := context.Background()
	before := live.Load()
	err := g.ReloadPolicy(ctx, gateway.PolicyReload{Via: "test", Source: "bp.yaml",
		Load: func(context.Context) (policy.Policy, error) { return nil, errors.New("bp.yaml:3: bad pattern") }})
	if err == nil || live.Load() != before {
		t.Fatalf("a refused reload: %v, policy changed %v", err, live.Load() != before)
	}
	err = g.ReloadPolicy(ctx, gateway.PolicyReload{Via: "test", Source: "bp.yaml",
		Load: func(context.Context) (policy.Policy, error) { return policy.DenyAll{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if g.Visible("alice", "flaky") {
		t.Error("after reloading deny-all, alice still sees flaky")
	}
	log := audit.String()
	for _, want := range []string{
		`"msg":"policy","event":"reload","outcome":"refused","via":"test","config":"bp.yaml","error":"bp.yaml:3: bad pattern"`,
		`"msg":"policy","event":"reload","outcome":"ok","via":"test","config":"bp.yaml"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s:\n%s", want, log)
		}
	}
	// A policy that is not live cannot be reloaded.
	fixed := gateway.New(&gateway.Options{Store: memstore.New(), Policy: policy.DenyAll{}})
	if err := fixed.ReloadPolicy(ctx, gateway.PolicyReload{Load: func(context.Context) (policy.Policy, error) { return policy.DenyAll{}, nil }}); err == nil {
		t.Error("a fixed policy was reloaded")
	}
}

// Incarnation is the store's, through the gateway.
func TestIncarnationView(t *testing.T) {
	st := memstore.New()
	g := gateway.New(&gateway.Options{Store: st})
	if g.Incarnation() == "" || g.Incarnation() != st.Incarnation() {
		t.Errorf("Incarnation() = %q, store's %q", g.Incarnation(), st.Incarnation())
	}
}
