package gateway_test

// D19: for every call the steps run in order, and a call refused at one step
// leaves no trace of any later step.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// secret is put in arguments to prove the audit log never carries their
// values.
const secret = "s3cret-hunter2-Zq9"

func TestUnknownToolTouchesNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		note := f.tool("note", nil)
		_, err := f.call("alice", "nope", `{"text":"`+secret+`"}`)
		ge := gwErr(t, err, tool.ClassNotFound)
		if !errors.Is(err, store.ErrNotFound) {
			t.Error("errors.Is(err, ErrNotFound) is false")
		}
		if ge.Step != "lookup" || ge.CallID != "" || ge.Tool != "nope" {
			t.Errorf("step %q call id %q tool %q, want lookup, no call id, nope", ge.Step, ge.CallID, ge.Tool)
		}
		if d := f.pol.Decisions(); len(d) != 0 {
			t.Errorf("policy consulted: %v", d)
		}
		if m := f.st.Methods(); len(m) != 0 {
			t.Errorf("store called: %v", m)
		}
		if note.Count() != 0 {
			t.Error("a backend was invoked")
		}
		ev := stepsOf(t, f.log.Events(t))
		if got := steps(ev); !slices.Equal(got, []string{"lookup"}) {
			t.Errorf("audit steps %v, want [lookup]", got)
		}
		if ev[0]["outcome"] != "not_found" || ev[0]["call_id"] == "" {
			t.Errorf("audit event %v", ev[0])
		}
		if strings.Contains(f.log.String(), secret) {
			t.Error("the audit log contains an argument value")
		}
	})
}

func TestInvalidArgumentsReportEveryViolationAndStop(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		note := f.tool("note", nil)
		// Three violations: text is missing, n is below its minimum, extra
		// is not allowed.
		args := `{"n":0,"extra":"` + secret + `"}`
		_, err := f.call("alice", "note", args)
		ge := gwErr(t, err, tool.ClassValidation)
		if ge.Step != "validate" {
			t.Errorf("step %q, want validate", ge.Step)
		}
		var kws []string
		for _, e := range ge.Errors {
			if e.Class != inputschema.ClassValidation || e.Stage != inputschema.StageArguments {
				t.Errorf("violation %v: class %s stage %s", e, e.Class, e.Stage)
			}
			kws = append(kws, e.Keyword)
		}
		if want := []string{"additionalProperties", "minimum", "required"}; !slices.Equal(sortedStrings(kws), want) {
			t.Errorf("violations %v, want one each of %v", kws, want)
		}
		if ge.Keyword == "" || ge.Keyword != ge.Errors[0].Keyword || ge.Path != ge.Errors[0].Path {
			t.Errorf("top-level fields (%q %q) do not repeat the first violation %v", ge.Keyword, ge.Path, ge.Errors[0])
		}
		// The wire form carries the list too.
		var wire struct {
			Class  string            `json:"class"`
			Errors []json.RawMessage `json:"errors"`
		}
		if err := json.Unmarshal([]byte(mustJSON(ge)), &wire); err != nil || wire.Class != "validation" || len(wire.Errors) != 3 {
			t.Errorf("wire form %s (%v)", mustJSON(ge), err)
		}
		if d := f.pol.Decisions(); len(d) != 0 {
			t.Errorf("policy consulted: %v", d)
		}
		if m := f.st.Methods(); len(m) != 0 {
			t.Errorf("store called: %v", m)
		}
		if note.Count() != 0 {
			t.Error("backend invoked")
		}
		ev := stepsOf(t, f.log.Events(t))
		if got := steps(ev); !slices.Equal(got, []string{"validate"}) {
			t.Errorf("audit steps %v, want [validate]", got)
		}
		if strings.Contains(f.log.String(), secret) {
			t.Error("the audit log contains an argument value")
		}
	})
}

func TestSchemaOutsideSubsetIsRegisteredButRefusedBeforePolicy(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		b := &recBackend{}
		// pattern is valid JSON Schema but outside the subset.
		schema := `{"type":"object","properties":{"text":{"type":"string","pattern":"^a"}}}`
		err := f.g.Register(context.Background(), tool.Tool{Name: "note", InputSchema: json.RawMessage(schema), Backend: b.Backend()})
		if err == nil {
			t.Fatal("Register accepted a schema outside the subset without an error")
		}
		var ie *inputschema.Error
		if !errors.As(err, &ie) || ie.Class != inputschema.ClassUnsupported || ie.Keyword != "pattern" {
			t.Fatalf("Register error %v: want an unsupported_capability *inputschema.Error for pattern", err)
		}
		tl, hash, ok := f.g.Tool("note")
		if !ok || string(tl.InputSchema) != schema || hash == "" {
			t.Fatalf("the tool is not registered unchanged: ok=%v schema=%s hash=%q", ok, tl.InputSchema, hash)
		}
		listed := false
		for _, x := range f.g.Tools() {
			listed = listed || x.Name == "note"
		}
		if !listed {
			t.Error("Tools() does not list the tool")
		}

		_, err = f.call("alice", "note", `{"text":"abc"}`)
		ge := gwErr(t, err, tool.ClassUnsupported)
		if !errors.Is(err, tool.ClassUnsupported) || ge.Step != "validate" || ge.Keyword != "pattern" {
			t.Errorf("call error %+v", ge)
		}
		if len(ge.Errors) == 0 || ge.Errors[0].Stage != inputschema.StageSchema {
			t.Errorf("violations %v, want the schema-stage error", ge.Errors)
		}
		if d := f.pol.Decisions(); len(d) != 0 {
			t.Errorf("policy consulted: %v", d)
		}
		if m := f.st.Methods(); len(m) != 0 {
			t.Errorf("store called: %v", m)
		}
		if b.Count() != 0 {
			t.Error("backend invoked")
		}
		noLaterSteps(t, stepsOf(t, f.log.Events(t)), "authorize", "approve", "reserve", "commit", "settle")
	})
}

func TestForbiddenLeavesNoApprovalIntentOrInvocation(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		// carol's rule allows danger but a CEL rule denies these arguments:
		// she may know of it (it is visible), and is refused at
		// authorization. (An approve entry alone lets a call through after
		// an approval, so it no longer makes the refused-but-visible case.)
		rules := append(slices.Clone(defaultRules), policy.Rule{Caller: "carol", Allow: []string{"danger"},
			Conditions: []policy.Condition{{Effect: policy.EffectDeny, Tool: "danger", If: `args.text != ""`}}})
		f := newFixture(t, mk, config{Rules: rules, Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 10}}})
		danger := f.tool("danger", nil, func(tl *tool.Tool) { tl.Safety.RequiresApproval = true })
		f.st.Reset()
		mark := f.log.Mark(t)
		_, err := f.call("carol", "danger", `{"text":"`+secret+`"}`)
		ge := gwErr(t, err, tool.ClassForbidden)
		if !errors.Is(err, tool.ClassForbidden) || ge.Step != "authorize" || ge.CallID != "" {
			t.Errorf("carol: %+v", ge)
		}
		if m := f.st.Methods(); len(m) != 0 {
			t.Errorf("store called: %v", m)
		}
		ev := stepsOf(t, f.log.Since(t, mark))
		inOrder(t, ev, "validate", "authorize")
		noLaterSteps(t, ev, "approve", "reserve", "commit", "settle")
		if d := f.pol.Decisions(); len(d) != 1 || d[0].Decision.Allow {
			t.Errorf("policy decisions %v, want one denial", d)
		}
		if len(f.approvals()) != 0 || len(f.intents()) != 0 || f.totalUsed() != 0 {
			t.Error("an approval, an intent or a reservation exists")
		}
		if danger.Count() != 0 {
			t.Error("backend invoked")
		}
		if strings.Contains(f.log.String(), secret) {
			t.Error("the audit log contains an argument value")
		}
	})
}

// TestInvisibleToolLooksUnknown: a tool the caller's policy neither allows
// nor puts to an approval answers exactly as a tool that does not exist:
// not_found at lookup with the same message shape, no validation errors
// (the schema stays unknown to that caller), no policy decision, nothing
// stored (issue 12, finding 7).
func TestInvisibleToolLooksUnknown(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		danger := f.tool("danger", nil)
		// mallory has no rule; bob has one that does not name danger. The
		// arguments break the schema: a validation error would reveal it.
		for _, caller := range []string{"mallory", "bob"} {
			f.st.Reset()
			mark := f.log.Mark(t)
			_, err := f.call(caller, "danger", `{"text":7,"extra":true}`)
			ge := gwErr(t, err, tool.ClassNotFound)
			_, err2 := f.call(caller, "no_such_tool", `{"text":7,"extra":true}`)
			unknown := gwErr(t, err2, tool.ClassNotFound)
			if ge.Step != "lookup" || len(ge.Errors) != 0 || ge.Keyword != "" || len(ge.Details) != len(unknown.Details) {
				t.Errorf("%s: %+v", caller, ge)
			}
			if want := strings.ReplaceAll(unknown.Message, "no_such_tool", "danger"); ge.Message != want {
				t.Errorf("%s: message %q, want the unknown tool's shape %q", caller, ge.Message, want)
			}
			if m := f.st.Methods(); len(m) != 0 {
				t.Errorf("%s: store called: %v", caller, m)
			}
			ev := stepsOf(t, f.log.Since(t, mark))
			noLaterSteps(t, ev, "validate", "authorize", "approve", "reserve", "commit", "settle")
		}
		if d := f.pol.Decisions(); len(d) != 0 {
			t.Errorf("policy decisions %v, want none", d)
		}
		if danger.Count() != 0 {
			t.Error("backend invoked")
		}
		// alice, who may call it, still gets its validation errors.
		_, err := f.call("alice", "danger", `{"text":7}`)
		if ge := gwErr(t, err, tool.ClassValidation); ge.Step != "validate" {
			t.Errorf("alice: %+v", ge)
		}
		if !f.g.Visible("alice", "danger") || f.g.Visible("bob", "danger") || f.g.Visible("alice", "nope") {
			t.Error("Gateway.Visible disagrees with the rules")
		}
	})
}

// TestBackendCheckRefusesBeforeApproval: a backend's own argument check
// (tool.Checker) refuses arguments the schema accepts before anything
// is approved, reserved or recorded (issue 12, finding 12).
func TestBackendCheckRefusesBeforeApproval(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 10}}})
		b := &recBackend{}
		err := f.g.Register(context.Background(), tool.Tool{Name: "danger", InputSchema: json.RawMessage(noteSchema), Backend: checked{
			Backend: b.Backend(),
			check: func(raw json.RawMessage) error {
				var a struct{ N *int }
				if err := json.Unmarshal(raw, &a); err != nil {
					return fmt.Errorf("n does not fit: %w", err)
				}
				return nil
			}}})
		if err != nil {
			t.Fatal(err)
		}
		f.st.Reset()
		mark := f.log.Mark(t)
		_, err = f.call("alice", "danger", `{"text":"x","n":1e400}`) // the schema accepts it
		ge := gwErr(t, err, tool.ClassValidation)
		if ge.Step != "validate" || !strings.Contains(ge.Message, "n does not fit") {
			t.Errorf("%+v", ge)
		}
		if m := f.st.Methods(); len(m) != 0 {
			t.Errorf("store called: %v", m)
		}
		noLaterSteps(t, stepsOf(t, f.log.Since(t, mark)), "authorize", "approve", "reserve", "commit", "settle")
		if len(f.approvals()) != 0 || len(f.intents()) != 0 || f.totalUsed() != 0 || b.Count() != 0 {
			t.Error("an approval, an intent, a reservation or an invocation exists")
		}
		// A call that passes the check goes on to the approval step.
		_, err = f.call("alice", "danger", `{"text":"x","n":2}`)
		gwErr(t, err, tool.ClassApprovalRequired)
	})
}

// checked is a backend with an argument check.
type checked struct {
	tool.Backend
	check func(json.RawMessage) error
}

func (c checked) Check(raw json.RawMessage) error { return c.check(raw) }

func TestApprovalPendingLeavesNoIntentBudgetOrInvocation(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 10}}})
		danger := f.tool("danger", nil)
		args := `{"text":"` + secret + `"}`
		_, err := f.call("alice", "danger", args)
		ge := gwErr(t, err, tool.ClassApprovalRequired)
		if !errors.Is(err, tool.ClassApprovalRequired) || ge.Step != "approve" || ge.CallID != "" {
			t.Errorf("%+v", ge)
		}
		id, _ := ge.Details["approval_id"].(string)
		if id == "" {
			t.Fatalf("details %v carry no approval_id", ge.Details)
		}
		a := f.approval(id)
		digest, _ := canonjson.Digest([]byte(args))
		_, defHash, _ := f.g.Tool("danger")
		if a.Status != store.ApprovalPending || a.Caller != "alice" || a.Tool != "danger" || a.ArgsDigest != digest || a.DefinitionHash != defHash {
			t.Errorf("approval request %+v is not bound to this call (digest %s, definition %s)", a, digest, defHash)
		}
		if n := f.st.Count("CommitIntent"); n != 0 {
			t.Errorf("CommitIntent called %d times", n)
		}
		if len(f.intents()) != 0 || f.totalUsed() != 0 {
			t.Error("an intent or a reservation exists")
		}
		if danger.Count() != 0 {
			t.Error("backend invoked")
		}
		ev := stepsOf(t, f.log.Events(t))
		inOrder(t, ev, "validate", "authorize", "approve")
		noLaterSteps(t, ev, "reserve", "commit", "settle")
		if strings.Contains(f.log.String(), secret) {
			t.Error("the audit log contains an argument value")
		}
	})
}

func TestBudgetExceededLeavesNoIntentOrInvocation(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1, Cost: map[string]int64{"note": 2}}}})
		note := f.tool("note", nil)
		_, err := f.call("alice", "note", `{"text":"`+secret+`"}`)
		ge := gwErr(t, err, tool.ClassBudgetExceeded)
		if !errors.Is(err, tool.ClassBudgetExceeded) || ge.Step != "reserve" || ge.CallID != "" {
			t.Errorf("%+v", ge)
		}
		if num(t, ge.Details["used"]) != 0 || num(t, ge.Details["requested"]) != 2 || num(t, ge.Details["quota"]) != 1 {
			t.Errorf("details %v, want used 0 requested 2 quota 1", ge.Details)
		}
		if ge.Details["scope"] != "caller" || ge.Details["key"] != "alice" {
			t.Errorf("details %v, want scope caller key alice", ge.Details)
		}
		if in := f.intents(); len(in) != 0 {
			t.Errorf("intents %v, want none", in)
		}
		if f.totalUsed() != 0 {
			t.Error("budget held")
		}
		if note.Count() != 0 {
			t.Error("backend invoked")
		}
		if n := f.st.Count("Settle"); n != 0 {
			t.Errorf("Settle called %d times", n)
		}
		ev := stepsOf(t, f.log.Events(t))
		inOrder(t, ev, "validate", "authorize", "approve", "reserve")
		noLaterSteps(t, ev, "commit", "settle")
		if strings.Contains(f.log.String(), secret) {
			t.Error("the audit log contains an argument value")
		}
	})
}

func TestSuccessRunsEachStepOnceInOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
		// The result is returned byte for byte, whitespace and member order
		// included.
		result := `{ "z": [1, 2.50, "x"],  "a": {"b" : null} }`
		note := f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(result)}, nil
		})
		args := `{"text": "` + secret + `", "n": 3}`
		res, err := f.do(gateway.CallRequest{Caller: "alice", Session: "s1", Tool: "note", Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Result) != result || res.IsError || res.Replayed || res.CallID == "" {
			t.Errorf("result %+v (%s), want exactly %s", res, res.Result, result)
		}
		// Policy once, store: one commit then one settlement, backend once
		// with the exact bytes.
		if d := f.pol.Decisions(); len(d) != 1 || !d[0].Decision.Allow || d[0].Caller != "alice" || d[0].Tool != "note" {
			t.Errorf("policy decisions %v", d)
		}
		if m := f.st.Methods(); !slices.Equal(m, []string{"CommitIntent", "Settle"}) {
			t.Errorf("store calls %v, want [CommitIntent Settle]", m)
		}
		calls := note.Calls()
		if len(calls) != 1 || string(calls[0].Arguments) != args || calls[0].CallID != res.CallID || calls[0].Caller != "alice" || calls[0].Session != "s1" {
			t.Fatalf("backend calls %+v, want one with the exact argument bytes", calls)
		}
		digest, _ := canonjson.Digest([]byte(args))
		in := f.intent(res.CallID)
		if in.Status != store.StatusSucceeded || in.ArgsDigest != digest || string(in.Arguments) != args || in.Caller != "alice" || in.Session != "s1" || in.Tool != "note" || in.SettledAt.IsZero() {
			t.Errorf("intent %+v", in)
		}
		if f.used("caller", "alice") != 1 {
			t.Errorf("budget used %d, want 1", f.used("caller", "alice"))
		}
		ev := stepsOf(t, f.log.Events(t))
		inOrder(t, ev, "validate", "authorize", "approve", "commit", "settle")
		for _, e := range ev {
			if e["call_id"] != res.CallID {
				t.Errorf("event %v is not for call %s", e, res.CallID)
			}
		}
		for _, s := range []string{"validate", "authorize", "approve", "commit", "settle"} {
			n := 0
			for _, e := range ev {
				if e["step"] == s {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d %q events, want 1", n, s)
			}
		}
		log := f.log.String()
		if strings.Contains(log, secret) {
			t.Error("the audit log contains an argument value")
		}
		if !strings.Contains(log, `"args_digest":"`+digest+`"`) {
			t.Errorf("the audit log does not carry args_digest %s:\n%s", digest, log)
		}
	})
}

// TestSuccessWithApprovalAuditOrder checks the approval step's events fall
// between authorization and commit, and that the audit never carries the
// argument values on this path either.
func TestSuccessWithApprovalAuditOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		f.tool("danger", nil)
		args := `{"text":"` + secret + `"}`
		_, err := f.call("alice", "danger", args)
		id := gwErr(t, err, tool.ClassApprovalRequired).Details["approval_id"].(string)
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		mark := f.log.Mark(t)
		res, err := f.call("alice", "danger", args)
		if err != nil {
			t.Fatal(err)
		}
		ev := stepsOf(t, f.log.Since(t, mark))
		inOrder(t, ev, "validate", "authorize", "approve", "commit", "settle")
		var approved bool
		for _, e := range ev {
			if e["step"] == "approve" && e["outcome"] == "approved" && e["approval_id"] == id {
				approved = true
			}
		}
		if !approved {
			t.Errorf("no approve/approved event for %s: %v", id, ev)
		}
		if f.intent(res.CallID).ApprovalID != id {
			t.Errorf("intent approval id %q, want %s", f.intent(res.CallID).ApprovalID, id)
		}
		if strings.Contains(f.log.String(), secret) {
			t.Error("the audit log contains an argument value")
		}
	})
}

// A pinned tool's pin is checked after the policy allows it and before
// anything is committed: an accepted definition from memory (the answer of
// its registration), a held one by a read at every call, which stops the
// call there. The recording store sees the pin methods like every other.
func TestPinnedToolPinStepsAreRecorded(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		note := f.tool("note", nil, func(tl *tool.Tool) { tl.Pinned = true })
		if m := f.st.Methods(); !slices.Equal(m, []string{"SeePin"}) {
			t.Fatalf("store calls at registration %v, want [SeePin]", m)
		}
		f.st.Reset()
		if _, err := f.call("alice", "note", `{"text":"a"}`); err != nil {
			t.Fatal(err)
		}
		if m := f.st.Methods(); !slices.Equal(m, []string{"CommitIntent", "Settle"}) {
			t.Errorf("store calls %v, want [CommitIntent Settle] (the accepted pin remembered)", m)
		}
		// The upstream changes the tool's definition: it is registered
		// again, held back, and the call stops at the pin, before the commit.
		f.g.Unregister("note")
		f.tool("note", nil, func(tl *tool.Tool) { tl.Pinned, tl.Description = true, "changed" })
		f.st.Reset()
		_, err := f.call("alice", "note", `{"text":"b"}`)
		gwErr(t, err, tool.ClassForbidden)
		if m := f.st.Methods(); !slices.Equal(m, []string{"GetPin"}) {
			t.Errorf("store calls %v, want [GetPin]", m)
		}
		if note.Count() != 1 || f.be["note"].Count() != 0 {
			t.Errorf("backends invoked %d and %d times, want 1 and 0", note.Count(), f.be["note"].Count())
		}
	})
}

// A gateway without a store is a programmer error, refused loudly at
// construction rather than run without durability.
func TestNewRequiresAStore(t *testing.T) {
	for name, opts := range map[string]*gateway.Options{"nil options": nil, "no store": {Timeout: time.Second}} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), "Store is required") {
					t.Errorf("New did not panic with the reason: %v", r)
				}
			}()
			gateway.New(opts)
		})
	}
}
