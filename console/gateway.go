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
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// GatewayOptions configure the Backend over a gateway. A nil
// *GatewayOptions, and every zero field, means the default.
type GatewayOptions struct {
	// Budgets are the configured quotas, shown beside the use.
	Budgets []budget.Quota
	// Facts describe the process on the health page (version, listen
	// address, configuration file).
	Facts []Fact
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Refused reports the servers whose validator refuses some of their
	// tools (serve's report); nil: none is shown.
	Refused func() []RefusedServer
}

// gatewayBackend is the Backend of a running gateway.
type gatewayBackend struct {
	g       *gateway.Gateway
	quotas  []budget.Quota
	facts   []Fact
	now     func() time.Time
	started time.Time
	refused func() []RefusedServer
}

// GatewayBackend returns the console's Backend over g: reads come from the
// gateway's views (never its store); actions go through the gateway, as an
// operator's, on the "console" channel.
func GatewayBackend(g *gateway.Gateway, opts *GatewayOptions) Backend {
	if g == nil {
		panic("console.GatewayBackend: nil gateway")
	}
	if opts == nil {
		opts = &GatewayOptions{}
	}
	b := &gatewayBackend{g: g, quotas: opts.Budgets, facts: opts.Facts, now: opts.Now, refused: opts.Refused}
	if b.now == nil {
		b.now = time.Now
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
	switch {
	case errors.Is(err, gateway.ErrActionNotFound):
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	case errors.Is(err, gateway.ErrActionForbidden):
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	case errors.Is(err, gateway.ErrActionConflict), errors.Is(err, gateway.ErrActionInvalid):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
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
		out.ToolDescription, out.MainArg = t.Description, t.MainArg
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
	out.Why = why(b.g.WhyApproval(&v.Approval))
	return &out, nil
}

// why is the gateway's explanation as the console shows it.
func why(w *opsview.ApprovalWhy) *Why {
	if w == nil {
		return nil
	}
	out := &Why{Effect: w.Effect, Rule: w.Rule, Reason: w.Reason, ToolAsks: w.ToolAsks, Source: w.Source,
		Deciders: w.Deciders, AnyOperator: w.AnyOperator, SelfApprove: w.SelfApprove}
	for _, p := range w.Parts {
		out.Parts = append(out.Parts, Part{Text: p.Text, Decision: string(p.Effect), Rule: p.Source, Reason: p.Reason})
	}
	if sb := w.Sandbox; sb != nil {
		out.Sandbox = &Sandbox{Sandboxed: sb.Sandboxed, Network: sb.Network, Write: sb.Write, Read: sb.Read}
	}
	return out
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
		Client: in.ClientInfo, ProtocolVersion: in.ProtocolVersion,
	}
	c.ToolError = opsview.ToolReportedError(in)
	c.ResultRefused = in.Status == store.StatusSucceeded && in.ErrorClass == string(tool.ClassInvalidResult)
	return c
}

// refusal is a refused call as the console shows it.
func refusal(r *store.Refusal) Call {
	return Call{ID: r.CallID, Caller: r.Caller, Session: r.Session, Tool: r.Tool, Status: opsview.StatusRefused,
		ErrorClass: r.Class, ErrorMessage: r.Message, ApprovalID: r.ApprovalID, CreatedAt: r.At,
		Refused: true, Step: r.Step, ArgsDigest: r.ArgsDigest}
}

func (b *gatewayBackend) ListCalls(ctx context.Context, q CallQuery) ([]Call, bool, error) {
	p, err := b.g.Journal(ctx, opsview.JournalQuery{Caller: q.Caller, Tool: q.Tool, Status: q.Status, Class: q.Class,
		Text: q.Text, Since: q.Since, Until: q.Until, Offset: q.Offset, Limit: q.Limit})
	if err != nil {
		return nil, false, backendErr(err)
	}
	out := make([]Call, 0, len(p.Entries))
	for _, e := range p.Entries {
		if e.Intent != nil {
			out = append(out, call(e.Intent))
		} else {
			out = append(out, refusal(e.Refusal))
		}
	}
	return out, p.More, nil
}

func (b *gatewayBackend) GetCall(ctx context.Context, id string) (*Call, error) {
	in, err := b.g.GetIntent(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		// A refused call has no intent: its refusal row, if kept.
		if r, rerr := b.g.GetRefusal(ctx, id); rerr == nil {
			c := refusal(r)
			return &c, nil
		}
	}
	if err != nil {
		return nil, backendErr(err)
	}
	c := call(in)
	return &c, nil
}

func (b *gatewayBackend) ResolveCall(ctx context.Context, id string, executed bool, operator, reason string) error {
	_, err := b.g.ResolveIntent(ctx, id, executed, operator, reason)
	return backendErr(err)
}

// maxOverviewBudgets bounds the budget lines an overview shows.
const maxOverviewBudgets = 20

func (b *gatewayBackend) Overview(ctx context.Context, since, until time.Time) (*Overview, error) {
	o, err := b.g.Overview(ctx, since, until, time.Minute)
	if err != nil {
		return nil, backendErr(err)
	}
	out := &Overview{Since: o.Since, Until: o.Until, Bucket: o.Bucket, Totals: o.Totals,
		P50: o.P50, P95: o.P95, Settled: o.Settled, Pending: o.Pending, Decided: o.Decided, Truncated: o.Truncated}
	for _, bk := range o.Buckets {
		out.Buckets = append(out.Buckets, Bucket{Start: bk.Start, Counts: bk.Counts})
	}
	if bs, err := b.Budgets(ctx); err == nil {
		out.Budgets = bs[:min(len(bs), maxOverviewBudgets)]
	}
	out.Upstreams = b.Upstreams(ctx)
	return out, nil
}

func (b *gatewayBackend) Upstreams(ctx context.Context) []Upstream {
	refused := map[string]*RefusedServer{}
	if b.refused != nil {
		for _, r := range b.refused() {
			refused[r.Server] = &r
		}
	}
	tools := map[string]int{}
	for _, t := range b.g.Tools() {
		if name, ok := tool.SourceServer(t.Source); ok {
			tools[name]++
		}
	}
	var out []Upstream
	for _, u := range b.g.Upstreams() {
		cu := Upstream{Name: u.Name, Required: u.Required, Up: u.Up, Restarts: u.Restarts, Tools: tools[u.Name], Refused: refused[u.Name],
			Phase: u.Phase, Protocol: u.Protocol}
		if u.Err != nil {
			cu.Error = u.Err.Error()
		}
		out = append(out, cu)
	}
	return out
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
	var pins map[string]opsview.Pin // read once, when a tool is pinned
	for _, t := range ts {
		_, hash, _ := b.g.Tool(t.Name)
		ct := Tool{
			Name: t.Name, Description: t.Description, Source: t.Source, InputSchema: t.InputSchema,
			OutputSchema: tool.OutputSchemaOf(t),
			ReadOnly:     t.Safety.ReadOnly, Idempotent: t.Safety.Idempotent, RequiresApproval: t.Safety.RequiresApproval,
			DefinitionHash: hash,
		}
		if name, ok := tool.SourceServer(t.Source); ok {
			ct.Down = down[name] // its calls fail until the server is back
		}
		if t.Pinned {
			if pins == nil {
				list, err := b.g.ListPins(ctx)
				if err != nil {
					return nil, backendErr(err)
				}
				pins = make(map[string]opsview.Pin, len(list))
				for _, p := range list {
					pins[p.Tool] = p
				}
			}
			if p, ok := pins[t.Name]; ok {
				ct.Pin = &Pin{AcceptedHash: p.AcceptedHash, SeenHash: p.SeenHash, AcceptedBy: p.AcceptedBy, UpdatedAt: p.UpdatedAt}
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
	// The checks of /healthz and /readyz (gateway.CheckHealth), and only
	// those: the page answers 503 exactly when /readyz does, and its
	// header is their overall state (opsview.State), as /healthz says it,
	// never "ok" above a failing row.
	checks := b.g.CheckHealth(ctx)
	h := Health{OK: opsview.Ready(checks) == nil, State: opsview.State(checks)}
	for _, c := range checks {
		hc := HealthCheck{Name: c.Name, OK: c.Err == nil, Detail: c.OK, State: opsview.CheckState(c)}
		if c.Err != nil {
			hc.Detail = c.Err.Error()
		}
		h.Checks = append(h.Checks, hc)
	}
	if checks[0].Err == nil {
		pending, err := b.g.ListApprovals(ctx, store.ApprovalFilter{Status: store.ApprovalPending, Limit: 1000})
		if err == nil {
			h.Facts = append(h.Facts, Fact{"Pending approvals", fmt.Sprint(len(pending))})
		}
	}
	if inc := b.g.Incarnation(); inc != "" {
		h.Facts = append(h.Facts, Fact{"Incarnation", inc})
	}
	h.Facts = append(h.Facts,
		Fact{"Tools", fmt.Sprint(len(b.g.Tools()))},
		Fact{"Console started", b.started.UTC().Format(time.RFC3339)})
	h.Facts = append(h.Facts, b.facts...)
	return h
}
