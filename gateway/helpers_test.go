package gateway_test

// Observation without mocks: every test runs the real gateway against a real
// store (memstore, and store/sqlite where it builds), a real policy.Rules and
// real backends, each wrapped by a recorder that only notes what was asked of
// it and passes everything through unchanged.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// storeFactories are the store implementations every table runs against.
// Files for other implementations add themselves in init (sqlite_test.go).
var storeFactories = map[string]func(t *testing.T) store.Store{
	"memstore": func(t *testing.T) store.Store { return memstore.New() },
}

// stores returns the store implementations to run a table against.
func stores(t *testing.T) map[string]func(t *testing.T) store.Store {
	t.Helper()
	return storeFactories
}

// forEachStore runs fn as one subtest per store implementation.
func forEachStore(t *testing.T, fn func(t *testing.T, mk func(t *testing.T) store.Store)) {
	t.Helper()
	names := slices.Sorted(maps.Keys(stores(t)))
	for _, name := range names {
		mk := stores(t)[name]
		t.Run(name, func(t *testing.T) { fn(t, mk) })
	}
}

// ---- recording store ----

type storeCall struct {
	Method string
	Args   []any
}

// recStore passes every method to the real store and records its name and
// arguments. It does not embed the store: every method of store.Store is
// written out below (the assertion after the type makes a method added to
// the interface a compile error here), so no call can reach the store
// unrecorded.
type recStore struct {
	real  store.Store
	mu    sync.Mutex
	calls []storeCall
	// before, when set, runs before each method reaches the real store,
	// with the method name and how many times it has been called: a test
	// uses it to act at an exact point of the pipeline (e.g. the caller
	// cancelling just as the gateway reads its approval).
	before func(method string, n int)
}

var _ store.Store = (*recStore)(nil)

func (r *recStore) rec(method string, args ...any) {
	r.mu.Lock()
	r.calls = append(r.calls, storeCall{method, args})
	n := 0
	for _, c := range r.calls {
		if c.Method == method {
			n++
		}
	}
	hook := r.before
	r.mu.Unlock()
	if hook != nil {
		hook(method, n)
	}
}

// Calls returns the recorded calls so far.
func (r *recStore) Calls() []storeCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Methods returns the recorded method names in call order, but for
// RecordRefusals: a refused call's row is the record of the refusal
// itself, not a later step of the pipeline (TestRefusalsAreRecorded checks
// it).
func (r *recStore) Methods() []string {
	var out []string
	for _, c := range r.Calls() {
		if c.Method != "RecordRefusals" {
			out = append(out, c.Method)
		}
	}
	return out
}

// Count returns how many times method was called.
func (r *recStore) Count(method string) int {
	n := 0
	for _, c := range r.Calls() {
		if c.Method == method {
			n++
		}
	}
	return n
}

// Reset forgets the recorded calls.
func (r *recStore) Reset() {
	r.mu.Lock()
	r.calls = nil
	r.mu.Unlock()
}

func (r *recStore) Incarnation() string {
	r.rec("Incarnation")
	return r.real.Incarnation()
}

func (r *recStore) CommitIntent(ctx context.Context, req *store.CommitRequest) (*store.Intent, error) {
	cp := *req
	cp.Reservations = slices.Clone(req.Reservations)
	r.rec("CommitIntent", cp)
	return r.real.CommitIntent(ctx, req)
}

func (r *recStore) Settle(ctx context.Context, callID string, s store.Settlement) error {
	// The context's state is recorded: a settlement must not be abandoned
	// because the caller went away.
	r.rec("Settle", callID, s, ctx.Err())
	return r.real.Settle(ctx, callID, s)
}

func (r *recStore) GetIntent(ctx context.Context, callID string) (*store.Intent, error) {
	r.rec("GetIntent", callID)
	return r.real.GetIntent(ctx, callID)
}

func (r *recStore) GetIntentByKey(ctx context.Context, caller, key string) (*store.Intent, error) {
	r.rec("GetIntentByKey", caller, key)
	return r.real.GetIntentByKey(ctx, caller, key)
}

func (r *recStore) ListIntents(ctx context.Context, f store.IntentFilter) ([]store.Intent, error) {
	r.rec("ListIntents", f)
	return r.real.ListIntents(ctx, f)
}

func (r *recStore) ResolveIntent(ctx context.Context, callID string, executed bool, by string, at time.Time) error {
	r.rec("ResolveIntent", callID, executed, by, at)
	return r.real.ResolveIntent(ctx, callID, executed, by, at)
}

func (r *recStore) Recover(ctx context.Context) (int, error) {
	r.rec("Recover")
	return r.real.Recover(ctx)
}

func (r *recStore) CreateApproval(ctx context.Context, a *store.Approval) error {
	r.rec("CreateApproval", *a)
	return r.real.CreateApproval(ctx, a)
}

func (r *recStore) OpenApproval(ctx context.Context, a *store.Approval, maxPending int) (*store.Approval, bool, error) {
	r.rec("OpenApproval", *a, maxPending)
	return r.real.OpenApproval(ctx, a, maxPending)
}

func (r *recStore) GetApproval(ctx context.Context, id string) (*store.Approval, error) {
	r.rec("GetApproval", id)
	return r.real.GetApproval(ctx, id)
}

func (r *recStore) FindApproval(ctx context.Context, k store.ApprovalKey, now time.Time) (*store.Approval, error) {
	r.rec("FindApproval", k, now)
	return r.real.FindApproval(ctx, k, now)
}

func (r *recStore) ListApprovals(ctx context.Context, f store.ApprovalFilter, now time.Time) ([]store.Approval, error) {
	r.rec("ListApprovals", f, now)
	return r.real.ListApprovals(ctx, f, now)
}

func (r *recStore) DecideApproval(ctx context.Context, id string, d store.ApprovalDecision) error {
	r.rec("DecideApproval", id, d)
	return r.real.DecideApproval(ctx, id, d)
}

func (r *recStore) BudgetUsage(ctx context.Context) ([]store.Usage, error) {
	r.rec("BudgetUsage")
	return r.real.BudgetUsage(ctx)
}

func (r *recStore) ResetBudget(ctx context.Context, scope, key string) ([]store.Usage, error) {
	r.rec("ResetBudget", scope, key)
	return r.real.ResetBudget(ctx, scope, key)
}

func (r *recStore) Prune(ctx context.Context, before time.Time) (store.PruneResult, error) {
	r.rec("Prune", before)
	return r.real.Prune(ctx, before)
}

func (r *recStore) PageIntents(ctx context.Context, f store.IntentFilter, cursor string) (store.IntentPage, error) {
	r.rec("PageIntents", f, cursor)
	return r.real.PageIntents(ctx, f, cursor)
}

func (r *recStore) SeePin(ctx context.Context, tool, hash string, now time.Time) (*store.Pin, error) {
	r.rec("SeePin", tool, hash, now)
	return r.real.SeePin(ctx, tool, hash, now)
}

func (r *recStore) GetPin(ctx context.Context, tool string) (*store.Pin, error) {
	r.rec("GetPin", tool)
	return r.real.GetPin(ctx, tool)
}

func (r *recStore) AcceptPin(ctx context.Context, tool, hash, by string, now time.Time) error {
	r.rec("AcceptPin", tool, hash, by, now)
	return r.real.AcceptPin(ctx, tool, hash, by, now)
}

func (r *recStore) ListPins(ctx context.Context) ([]store.Pin, error) {
	r.rec("ListPins")
	return r.real.ListPins(ctx)
}

func (r *recStore) PutCredential(ctx context.Context, c *store.Credential, prev []byte) error {
	r.rec("PutCredential", c.Server, c.Caller)
	return r.real.PutCredential(ctx, c, prev)
}

func (r *recStore) GetCredential(ctx context.Context, server, caller string) (*store.Credential, error) {
	r.rec("GetCredential", server, caller)
	return r.real.GetCredential(ctx, server, caller)
}

func (r *recStore) AddPendingLogin(ctx context.Context, l *store.PendingLogin, now time.Time, max int) error {
	r.rec("AddPendingLogin", l.Server, l.Caller)
	return r.real.AddPendingLogin(ctx, l, now, max)
}

func (r *recStore) ListPendingLogins(ctx context.Context, server, caller string, now time.Time) ([]store.PendingLogin, error) {
	r.rec("ListPendingLogins", server, caller)
	return r.real.ListPendingLogins(ctx, server, caller, now)
}

func (r *recStore) TakePendingLogin(ctx context.Context, key string) (*store.PendingLogin, error) {
	r.rec("TakePendingLogin")
	return r.real.TakePendingLogin(ctx, key)
}

func (r *recStore) ListCredentials(ctx context.Context, server string) ([]store.Credential, error) {
	r.rec("ListCredentials", server)
	return r.real.ListCredentials(ctx, server)
}

func (r *recStore) DeleteCredential(ctx context.Context, server, caller string) error {
	r.rec("DeleteCredential", server, caller)
	return r.real.DeleteCredential(ctx, server, caller)
}

func (r *recStore) Close() error {
	r.rec("Close")
	return r.real.Close()
}

// ---- recording policy ----

type decisionRec struct {
	Caller, Tool string
	Decision     policy.Decision
}

// recPolicy records every decision of the real rules.
type recPolicy struct {
	rules *policy.Rules
	mu    sync.Mutex
	got   []decisionRec
}

func (p *recPolicy) Decide(r policy.Request) policy.Decision {
	d := p.rules.Decide(r)
	p.mu.Lock()
	p.got = append(p.got, decisionRec{r.Caller, r.Tool, d})
	p.mu.Unlock()
	return d
}

// Visible is the real rules' answer, not recorded: Decisions are the
// authorization step's.
func (p *recPolicy) Visible(caller, tool string) bool { return p.rules.Visible(caller, tool) }

// ApproverRule passes the rules' approvers through (policy.Approvers).
func (p *recPolicy) ApproverRule(caller, tool string) policy.ApproverRule {
	return p.rules.ApproverRule(caller, tool)
}

func (p *recPolicy) Decisions() []decisionRec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

// ---- recording backend ----

// recBackend counts invocations and keeps the argument bytes of each; fn
// decides what the tool does (nil: echo {"ok":true}).
type recBackend struct {
	n   atomic.Int64
	mu  sync.Mutex
	got []*tool.Call
	fn  tool.BackendFunc
}

func (b *recBackend) Backend() tool.Backend {
	return tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
		b.n.Add(1)
		cp := *c
		cp.Arguments = bytes.Clone(c.Arguments)
		b.mu.Lock()
		b.got = append(b.got, &cp)
		b.mu.Unlock()
		if b.fn == nil {
			return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
		}
		return b.fn(ctx, c)
	})
}

func (b *recBackend) Count() int { return int(b.n.Load()) }

func (b *recBackend) Calls() []*tool.Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

// ---- recording approver ----

type recApprover struct {
	mu    sync.Mutex
	asked []store.Approval
	ask   func(ctx context.Context, a *store.Approval) (gateway.ApprovalAnswer, error)
}

func (r *recApprover) Ask(ctx context.Context, a *store.Approval) (gateway.ApprovalAnswer, error) {
	r.mu.Lock()
	r.asked = append(r.asked, *a)
	r.mu.Unlock()
	return r.ask(ctx, a)
}

func (r *recApprover) Asked() []store.Approval {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

// ---- audit log ----

// auditLog is the buffer a slog.JSONHandler writes the audit events into.
type auditLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *auditLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *auditLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Events parses every line written so far.
func (l *auditLog) Events(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line is not JSON: %v: %s", err, line)
		}
		out = append(out, m)
	}
	return out
}

// Mark returns a position to read events after.
func (l *auditLog) Mark(t *testing.T) int { return len(l.Events(t)) }

// Since returns the events after mark.
func (l *auditLog) Since(t *testing.T, mark int) []map[string]any { return l.Events(t)[mark:] }

// stepsOf flattens each call event into its steps, in order, each with
// the call's identity (call_id, caller, tool, session, args_digest) beside
// the step's own fields; other events are kept as they are. It checks the
// call event's shape on the way: a steps list of objects, each with a step,
// an outcome and a duration.
func stepsOf(t *testing.T, events []map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range events {
		if e["msg"] != "call" {
			out = append(out, e)
			continue
		}
		list, ok := e["steps"].([]any)
		if !ok || len(list) == 0 {
			t.Fatalf("call event without a steps list: %v", e)
		}
		for _, s := range list {
			m, ok := s.(map[string]any)
			if !ok {
				t.Fatalf("call event step %v is not an object", s)
			}
			if _, ok := m["step"].(string); !ok {
				t.Fatalf("call event step without a step name: %v", m)
			}
			if _, ok := m["outcome"].(string); !ok {
				t.Fatalf("call event step without an outcome: %v", m)
			}
			if d, ok := m["duration_ms"].(float64); !ok || d < 0 {
				t.Fatalf("call event step without a duration: %v", m)
			}
			for _, k := range []string{"call_id", "caller", "tool", "session", "args_digest"} {
				if v, ok := e[k]; ok {
					m[k] = v
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// steps lists the step of each event.
func steps(events []map[string]any) []string {
	var out []string
	for _, e := range events {
		s, _ := e["step"].(string)
		out = append(out, s)
	}
	return out
}

// ---- fake clock ----

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// ---- fixture ----

// noteSchema is the example tool schema.
const noteSchema = `{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"integer","minimum":1}},"required":["text"],"additionalProperties":false}`

type config struct {
	Rules          []policy.Rule
	Budgets        []budget.Quota
	Approvals      gateway.ApprovalOptions
	Limits         inputschema.Limits
	MaxResultBytes int
	Timeout        time.Duration
	Clock          *fakeClock // nil: the real clock
	Store          store.Store
}

// defaultRules let alice and bob call note and danger, danger only after
// approval.
var defaultRules = []policy.Rule{
	{Caller: "alice", Allow: []string{"note", "danger", "fs.*"}, Approve: []string{"danger"}},
	{Caller: "bob", Allow: []string{"note"}},
}

type fixture struct {
	t     *testing.T
	g     *gateway.Gateway
	raw   store.Store
	st    *recStore
	pol   *recPolicy
	log   *auditLog
	clock *fakeClock
	be    map[string]*recBackend
}

func newFixture(t *testing.T, mk func(t *testing.T) store.Store, cfg config) *fixture {
	t.Helper()
	raw := cfg.Store
	if raw == nil {
		raw = mk(t)
	}
	rules := cfg.Rules
	if rules == nil {
		rules = defaultRules
	}
	pr, err := policy.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, raw: raw, st: &recStore{real: raw}, pol: &recPolicy{rules: pr}, log: &auditLog{}, clock: cfg.Clock, be: map[string]*recBackend{}}
	opts := &gateway.Options{
		Store: f.st, Policy: f.pol, Budgets: cfg.Budgets, Approvals: cfg.Approvals,
		Logger:  slog.New(slog.NewJSONHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Timeout: cfg.Timeout, MaxResultBytes: cfg.MaxResultBytes, Limits: cfg.Limits,
	}
	if cfg.Clock != nil {
		opts.Now = cfg.Clock.Now
	}
	f.g = gateway.New(opts)
	return f
}

// tool registers name with noteSchema (or schema) and a recording backend
// running fn, and returns the backend.
func (f *fixture) tool(name string, fn tool.BackendFunc, mod ...func(*tool.Tool)) *recBackend {
	f.t.Helper()
	b := &recBackend{fn: fn}
	tl := tool.Tool{Name: name, Description: "test tool " + name, InputSchema: json.RawMessage(noteSchema), Backend: b.Backend()}
	for _, m := range mod {
		m(&tl)
	}
	if err := f.g.Register(context.Background(), tl); err != nil {
		f.t.Fatalf("Register(%s): %v", name, err)
	}
	f.be[name] = b
	return b
}

func (f *fixture) call(caller, tool, args string) (*gateway.CallResult, error) {
	return f.g.Call(context.Background(), gateway.CallRequest{Caller: caller, Tool: tool, Arguments: json.RawMessage(args)})
}

func (f *fixture) do(req gateway.CallRequest) (*gateway.CallResult, error) {
	return f.g.Call(context.Background(), req)
}

// intents lists every journal entry, newest first.
func (f *fixture) intents() []store.Intent {
	f.t.Helper()
	in, err := f.raw.ListIntents(context.Background(), store.IntentFilter{Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

func (f *fixture) intent(id string) *store.Intent {
	f.t.Helper()
	in, err := f.raw.GetIntent(context.Background(), id)
	if err != nil {
		f.t.Fatalf("GetIntent(%s): %v", id, err)
	}
	return in
}

func (f *fixture) approvals() []store.Approval {
	f.t.Helper()
	now := time.Now()
	if f.clock != nil {
		now = f.clock.Now()
	}
	as, err := f.raw.ListApprovals(context.Background(), store.ApprovalFilter{Limit: 1000}, now)
	if err != nil {
		f.t.Fatal(err)
	}
	return as
}

func (f *fixture) approval(id string) *store.Approval {
	f.t.Helper()
	a, err := f.raw.GetApproval(context.Background(), id)
	if err != nil {
		f.t.Fatalf("GetApproval(%s): %v", id, err)
	}
	return a
}

// used returns the budget held in (scope, key); 0 when none is listed.
func (f *fixture) used(scope, key string) int64 {
	f.t.Helper()
	us, err := f.raw.BudgetUsage(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	for _, u := range us {
		if u.Scope == scope && u.Key == key {
			return u.Used
		}
	}
	return 0
}

// totalUsed adds up all budget held.
func (f *fixture) totalUsed() int64 {
	f.t.Helper()
	us, err := f.raw.BudgetUsage(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	var n int64
	for _, u := range us {
		n += u.Used
	}
	return n
}

// decide decides through the gateway's operator API, as the CLI does.
func (f *fixture) decide(id string, approve bool, by string) error {
	_, err := f.g.DecideApproval(context.Background(), id, gateway.ApprovalDecision{Operator: by, Approve: approve, Channel: gateway.ChannelCLI})
	return err
}

// ---- assertions ----

// gwErr asserts err is a *gateway.Error of class want.
func gwErr(t *testing.T, err error, want tool.Class) *gateway.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want class %s", want)
	}
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		t.Fatalf("error %T %v is not a *gateway.Error", err, err)
	}
	if ge.Class != want {
		t.Fatalf("class = %s (step %s: %s), want %s", ge.Class, ge.Step, ge.Message, want)
	}
	return ge
}

// num reads an integer detail whatever Go type carries it.
func num(t *testing.T, v any) int64 {
	t.Helper()
	switch x := v.(type) {
	case int64:
		return x
	case int:
		return int64(x)
	case float64:
		return int64(x)
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Fatalf("detail %v (%T) is not a number", v, v)
	return 0
}

// noLaterSteps asserts no event is for any of the named steps.
func noLaterSteps(t *testing.T, events []map[string]any, later ...string) {
	t.Helper()
	for _, e := range events {
		for _, s := range later {
			if e["step"] == s {
				t.Errorf("audit has a %q event after the call failed earlier: %v", s, e)
			}
		}
	}
}

// inOrder asserts each named step has an event and the first events of the
// steps appear in the given order.
func inOrder(t *testing.T, events []map[string]any, want ...string) {
	t.Helper()
	first := map[string]int{}
	for i, e := range events {
		s, _ := e["step"].(string)
		if _, ok := first[s]; !ok {
			first[s] = i
		}
	}
	prev := -1
	for _, s := range want {
		i, ok := first[s]
		if !ok {
			t.Fatalf("no audit event for step %q; steps: %v", s, steps(events))
		}
		if i <= prev {
			t.Fatalf("step %q is out of order; steps: %v", s, steps(events))
		}
		prev = i
	}
}

func sortedStrings(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return string(b)
}

func (r *recStore) RecordRefusals(ctx context.Context, rs []store.Refusal) error {
	r.rec("RecordRefusals", slices.Clone(rs))
	return r.real.RecordRefusals(ctx, rs)
}

func (r *recStore) ListRefusals(ctx context.Context, f store.RefusalFilter) ([]store.Refusal, error) {
	r.rec("ListRefusals", f)
	return r.real.ListRefusals(ctx, f)
}

func (r *recStore) CreateTask(ctx context.Context, t *store.Task) (*store.Task, error) {
	r.rec("CreateTask", t.ID)
	return r.real.CreateTask(ctx, t)
}

func (r *recStore) DueTasks(ctx context.Context, now time.Time, limit int) ([]store.Task, error) {
	r.rec("DueTasks", now, limit)
	return r.real.DueTasks(ctx, now, limit)
}

func (r *recStore) GetTask(ctx context.Context, id string) (*store.Task, error) {
	r.rec("GetTask", id)
	return r.real.GetTask(ctx, id)
}

func (r *recStore) UpdateTask(ctx context.Context, id string, u store.TaskUpdate) error {
	r.rec("UpdateTask", id, u)
	return r.real.UpdateTask(ctx, id, u)
}
