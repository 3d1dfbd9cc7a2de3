package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
)

// GatewayOptions configure the Backend over a gateway. A nil
// *GatewayOptions, and every zero field, means the default.
type GatewayOptions struct {
	// Budgets are the configured quotas, shown beside the use.
	Budgets []budget.Quota
	// Source names where a tool comes from (builtin, command, an upstream).
	// Default: the upstream's name for a pinned tool NAME.TOOL, else "".
	Source func(tool string) string
	// Facts describe the process on the health page (version, listen
	// address, configuration file).
	Facts []Fact
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// gatewayBackend is the Backend of a running gateway.
type gatewayBackend struct {
	g       *gateway.Gateway
	st      gateway.Store
	quotas  []budget.Quota
	source  func(string) string
	facts   []Fact
	now     func() time.Time
	started time.Time
}

// GatewayBackend returns the console's Backend over g: reads come from the
// gateway and its store; actions go through the gateway, as an operator's,
// on the "console" channel.
func GatewayBackend(g *gateway.Gateway, opts *GatewayOptions) Backend {
	if g == nil {
		panic("console.GatewayBackend: nil gateway")
	}
	if opts == nil {
		opts = &GatewayOptions{}
	}
	b := &gatewayBackend{g: g, st: g.Store(), quotas: opts.Budgets, source: opts.Source, facts: opts.Facts, now: opts.Now}
	if b.now == nil {
		b.now = time.Now
	}
	if b.source == nil {
		b.source = func(string) string { return "" }
	}
	b.started = b.now()
	return b
}

// backendErr maps the gateway's and the store's errors to the console's
// kinds.
func backendErr(err error) error {
	if err == nil {
		return nil
	}
	var oe *gateway.OperatorError
	if errors.As(err, &oe) {
		switch oe.Class {
		case "not_found":
			return fmt.Errorf("%w: %w", gateway.ErrNotFound, err)
		case "not_operator", "not_approver", "self_approval":
			return fmt.Errorf("%w: %w", ErrForbidden, err)
		default: // expired, already_decided, not_uncertain, not_pinned, changed
			return fmt.Errorf("%w: %w", ErrConflict, err)
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", gateway.ErrNotFound, err)
	}
	return err
}

// summary is a request as listed, without what only GetApproval reads
// (the arguments, the preview).
func (b *gatewayBackend) summary(a *store.Approval) Approval {
	out := Approval{
		ID: a.ID, Caller: a.Caller, Session: a.Session, Tool: a.Tool,
		Status:         string(store.EffectiveApprovalStatus(a, b.now())),
		DefinitionHash: a.DefinitionHash, ArgsDigest: a.ArgsDigest,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt,
		DecidedBy: a.DecidedBy, Channel: a.Channel, Reason: a.Reason, DecidedAt: a.DecidedAt,
		ConsumedBy: a.ConsumedBy,
	}
	if t, _, ok := b.g.Tool(a.Tool); ok {
		out.ToolDescription = t.Description
	}
	return out
}

func (b *gatewayBackend) ListApprovals(ctx context.Context, status string, limit int) ([]Approval, error) {
	as, err := b.g.ListApprovals(ctx, store.ApprovalFilter{Status: store.ApprovalStatus(status), Limit: limit})
	if err != nil {
		return nil, backendErr(err)
	}
	out := make([]Approval, 0, len(as))
	for i := range as {
		out = append(out, b.summary(&as[i]))
	}
	return out, nil
}

func (b *gatewayBackend) GetApproval(ctx context.Context, id string) (*Approval, error) {
	v, err := b.g.GetApproval(ctx, id)
	if err != nil {
		return nil, backendErr(err)
	}
	out := b.summary(&v.Approval)
	out.Status = string(v.Status)
	if v.Description != "" {
		out.ToolDescription = v.Description
	}
	out.Arguments = v.Arguments
	if v.Preview != nil {
		out.Diff, out.Command = v.Preview.Diff, v.Preview.Command
	}
	out.PreviewError = v.PreviewError
	out.Approvers = v.Approvers
	out.Waiting = v.Waiting
	out.HowToDecide = v.HowToDecide
	return &out, nil
}

func (b *gatewayBackend) DecideApproval(ctx context.Context, id string, approve bool, operator, reason string) error {
	_, err := b.g.DecideApproval(ctx, id, gateway.ApprovalDecision{Operator: operator, Approve: approve, Reason: reason, Channel: gateway.ChannelConsole})
	return backendErr(err)
}

// Changes implements Notifier: the gateway's approval events of this
// process wake the live streams at once (reading the store remains the
// truth, and shows other replicas' requests too).
func (b *gatewayBackend) Changes() (<-chan struct{}, func()) {
	evs, stop := b.g.SubscribeApprovals()
	out := make(chan struct{}, 1)
	go func() {
		for range evs {
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, stop
}

// call is a journal entry as the console shows it.
func call(in *store.Intent) Call {
	c := Call{
		ID: in.CallID, Caller: in.Caller, Session: in.Session, Tool: in.Tool, Status: string(in.Status),
		ErrorClass: in.ErrorClass, ErrorMessage: in.ErrorMessage,
		Arguments: json.RawMessage(in.Arguments), Result: json.RawMessage(in.Result),
		ApprovalID: in.ApprovalID, IdempotencyKey: in.IdempotencyKey, DefinitionHash: in.DefinitionHash,
		ResolvedBy: in.ResolvedBy, CreatedAt: in.CreatedAt, SettledAt: in.SettledAt,
	}
	c.ToolError = gateway.ToolReportedError(in)
	return c
}

// maxToolErrorScan bounds how many succeeded calls are read to find the
// ones whose tool reported an error (the store has no such filter).
const maxToolErrorScan = 10000

func (b *gatewayBackend) ListCalls(ctx context.Context, q CallQuery) ([]Call, bool, error) {
	if q.Limit <= 0 {
		q.Limit = PageSize
	}
	f := store.IntentFilter{Caller: q.Caller, Tool: q.Tool, Status: store.Status(q.Status)}
	toolErrors := q.Status == "tool_error"
	if toolErrors {
		f.Status, f.Limit = store.StatusSucceeded, maxToolErrorScan
	} else {
		// The store pages by limit only: read up to the end of this page
		// and one more, to know whether another page follows.
		f.Limit = q.Offset + q.Limit + 1
	}
	ins, err := b.g.ListIntents(ctx, f)
	if err != nil {
		return nil, false, backendErr(err)
	}
	var all []Call
	for i := range ins {
		c := call(&ins[i])
		if toolErrors && !c.ToolError {
			continue
		}
		all = append(all, c)
	}
	if q.Offset >= len(all) {
		return nil, false, nil
	}
	all = all[q.Offset:]
	if len(all) > q.Limit {
		return all[:q.Limit], true, nil
	}
	return all, false, nil
}

func (b *gatewayBackend) GetCall(ctx context.Context, id string) (*Call, error) {
	in, err := b.g.GetIntent(ctx, id)
	if err != nil {
		return nil, backendErr(err)
	}
	c := call(in)
	return &c, nil
}

func (b *gatewayBackend) Budgets(ctx context.Context) ([]Budget, error) {
	us, err := b.g.BudgetUsage(ctx)
	if err != nil {
		return nil, backendErr(err)
	}
	out := make([]Budget, 0, len(us))
	starts := make([]time.Time, 0, len(us))
	for _, u := range us {
		bu := Budget{Scope: u.Scope, Key: u.Key, Used: u.Used, Quota: u.Quota}
		if !u.Window.IsZero() {
			bu.Window = fmt.Sprintf("%s, %s to %s", u.Window.Per,
				u.Window.Start.UTC().Format("2006-01-02 15:04"), u.Window.End().UTC().Format("2006-01-02 15:04 UTC"))
		}
		if bu.Quota == 0 {
			// A store that does not keep the quota: the configured one.
			for _, q := range b.quotas {
				if string(q.Scope) == u.Scope && q.Per == u.Window.Per {
					bu.Quota = q.Quota
				}
			}
		}
		out = append(out, bu)
		starts = append(starts, u.Window.Start)
	}
	// By scope and key; the newest window first.
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(i, j int) int {
		if c := strings.Compare(out[i].Scope+"\x00"+out[i].Key, out[j].Scope+"\x00"+out[j].Key); c != 0 {
			return c
		}
		return starts[j].Compare(starts[i])
	})
	sorted := make([]Budget, len(out))
	for k, i := range idx {
		sorted[k] = out[i]
	}
	out = sorted
	return out, nil
}

func (b *gatewayBackend) Tools(ctx context.Context) ([]Tool, error) {
	ts := b.g.Tools()
	out := make([]Tool, 0, len(ts))
	down := map[string]string{} // upstream name -> why it is down
	for _, u := range b.g.Upstreams() {
		if !u.Up {
			down[u.Name] = "down"
			if u.Err != nil {
				down[u.Name] = u.Err.Error()
			}
		}
	}
	for _, t := range ts {
		_, hash, _ := b.g.Tool(t.Name)
		ct := Tool{
			Name: t.Name, Description: t.Description, Source: b.source(t.Name), InputSchema: t.InputSchema,
			ReadOnly: t.Safety.ReadOnly, Idempotent: t.Safety.Idempotent, RequiresApproval: t.Safety.RequiresApproval,
			DefinitionHash: hash,
		}
		if name, ok := strings.CutPrefix(ct.Source, "upstream "); ok {
			ct.Down = down[name] // its calls fail until the server is back
		}
		if t.Pinned {
			if ct.Source == "" {
				ct.Source, _, _ = strings.Cut(t.Name, ".")
			}
			p, err := b.st.GetPin(ctx, t.Name)
			switch {
			case err == nil:
				ct.Pin = &Pin{AcceptedHash: p.AcceptedHash, SeenHash: p.SeenHash, AcceptedBy: p.AcceptedBy, UpdatedAt: p.UpdatedAt}
			case !errors.Is(err, store.ErrNotFound):
				return nil, backendErr(err)
			}
		}
		out = append(out, ct)
	}
	slices.SortFunc(out, func(x, y Tool) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

func (b *gatewayBackend) AcceptDefinition(ctx context.Context, tool, hash, operator string) error {
	_, err := b.g.AcceptDefinition(ctx, tool, operator, hash)
	return backendErr(err)
}

func (b *gatewayBackend) Health(ctx context.Context) Health {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The checks of /healthz and /readyz (gateway.CheckHealth): the page
	// answers 503 exactly when /readyz does, and its header is the worst
	// of its rows (gateway.State), never "ok" above a failing one.
	checks := b.g.CheckHealth(ctx)
	h := Health{OK: gateway.Ready(checks) == nil}
	for _, c := range checks {
		hc := HealthCheck{Name: c.Name, OK: c.Err == nil, Detail: c.OK, State: gateway.CheckState(c)}
		if c.Err != nil {
			hc.Detail = c.Err.Error()
		}
		h.Checks = append(h.Checks, hc)
	}
	err := checks[0].Err
	if err == nil {
		pending, err := b.st.ListApprovals(ctx, store.ApprovalFilter{Status: store.ApprovalPending, Limit: 1000}, b.now())
		if err == nil {
			h.Facts = append(h.Facts, Fact{"Pending approvals", fmt.Sprint(len(pending))})
		}
		unc, err := b.st.ListIntents(ctx, store.IntentFilter{Status: store.StatusUncertain, Limit: 1000})
		if err == nil {
			c := HealthCheck{Name: "no uncertain calls", OK: len(unc) == 0, Detail: "none", State: gateway.StateOK}
			if len(unc) > 0 {
				// The gateway serves; an operator has something to do.
				c.State = gateway.StateDegraded
				c.Detail = fmt.Sprintf("%d call(s) have an unknown outcome: resolve them (journal, status uncertain)", len(unc))
			}
			h.Checks = append(h.Checks, c)
		}
	}
	if inc, ok := b.st.(interface{ Incarnation() string }); ok {
		h.Facts = append(h.Facts, Fact{"Incarnation", inc.Incarnation()})
	}
	h.Facts = append(h.Facts,
		Fact{"Tools", fmt.Sprint(len(b.g.Tools()))},
		Fact{"Console started", b.started.UTC().Format(time.RFC3339)})
	h.Facts = append(h.Facts, b.facts...)
	h.State = worstState(h.Checks)
	return h
}

// worstState is the overall state of a page's rows, the worst first:
// failing, not_ready, degraded, ok.
func worstState(checks []HealthCheck) string {
	rank := map[string]int{gateway.StateOK: 0, gateway.StateDegraded: 1, gateway.StateNotReady: 2, gateway.StateFailing: 3}
	worst := gateway.StateOK
	for _, c := range checks {
		if rank[c.State] > rank[worst] {
			worst = c.State
		}
	}
	return worst
}
