package gateway_test

// Budget reservation: quotas per caller and per session, a cost per tool,
// never over-spent whatever the concurrency.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

func TestBudgetPerCaller(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 3}}})
		note := f.tool("note", nil)
		for i := range 3 {
			if _, err := f.call("alice", "note", fmt.Sprintf(`{"text":"%d"}`, i)); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		_, err := f.call("alice", "note", `{"text":"4th"}`)
		ge := gwErr(t, err, tool.ClassBudgetExceeded)
		if num(t, ge.Details["used"]) != 3 || num(t, ge.Details["requested"]) != 1 || num(t, ge.Details["quota"]) != 3 || ge.Details["key"] != "alice" {
			t.Errorf("details %v, want alice used 3 requested 1 quota 3", ge.Details)
		}
		// Another caller has a quota of its own.
		if _, err := f.call("bob", "note", `{"text":"b"}`); err != nil {
			t.Errorf("bob: %v", err)
		}
		if f.used("caller", "alice") != 3 || f.used("caller", "bob") != 1 {
			t.Errorf("used alice %d bob %d, want 3 and 1", f.used("caller", "alice"), f.used("caller", "bob"))
		}
		if note.Count() != 4 || len(f.intents()) != 4 {
			t.Errorf("%d invocations, %d intents, want 4 and 4", note.Count(), len(f.intents()))
		}
	})
}

func TestBudgetPerSession(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeSession, Quota: 2}}})
		f.tool("note", nil)
		call := func(caller, session string) error {
			_, err := f.do(gateway.CallRequest{Caller: caller, Session: session, Tool: "note", Arguments: json.RawMessage(`{"text":"x"}`)})
			return err
		}
		// Two callers share session s1's quota.
		if err := call("alice", "s1"); err != nil {
			t.Fatal(err)
		}
		if err := call("bob", "s1"); err != nil {
			t.Fatal(err)
		}
		ge := gwErr(t, call("alice", "s1"), tool.ClassBudgetExceeded)
		if ge.Details["scope"] != "session" || ge.Details["key"] != "s1" || num(t, ge.Details["used"]) != 2 || num(t, ge.Details["quota"]) != 2 {
			t.Errorf("details %v", ge.Details)
		}
		if err := call("alice", "s2"); err != nil {
			t.Errorf("session s2: %v", err)
		}
		if f.used("session", "s1") != 2 || f.used("session", "s2") != 1 {
			t.Errorf("used s1 %d s2 %d", f.used("session", "s1"), f.used("session", "s2"))
		}
	})
}

func TestBudgetCostPerTool(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{
			Rules:   []policy.Rule{{Caller: "alice", Allow: []string{"note", "danger"}}},
			Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 3, Cost: map[string]int64{"danger": 2}}},
		})
		f.tool("note", nil)
		danger := f.tool("danger", nil)
		if _, err := f.call("alice", "danger", `{"text":"x"}`); err != nil {
			t.Fatal(err)
		}
		if f.used("caller", "alice") != 2 {
			t.Fatalf("danger took %d, want 2", f.used("caller", "alice"))
		}
		_, err := f.call("alice", "danger", `{"text":"y"}`)
		ge := gwErr(t, err, tool.ClassBudgetExceeded)
		if num(t, ge.Details["used"]) != 2 || num(t, ge.Details["requested"]) != 2 || num(t, ge.Details["quota"]) != 3 {
			t.Errorf("details %v, want used 2 requested 2 quota 3", ge.Details)
		}
		// The default cost of 1 still fits.
		if _, err := f.call("alice", "note", `{"text":"z"}`); err != nil {
			t.Fatal(err)
		}
		if f.used("caller", "alice") != 3 || danger.Count() != 1 {
			t.Errorf("used %d, danger ran %d times", f.used("caller", "alice"), danger.Count())
		}
	})
}

// Both scopes are reserved together, or neither is.
func TestBudgetCallerAndSessionTogether(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{
			{Scope: budget.ScopeCaller, Quota: 10},
			{Scope: budget.ScopeSession, Quota: 1},
		}})
		f.tool("note", nil)
		req := gateway.CallRequest{Caller: "alice", Session: "s1", Tool: "note", Arguments: json.RawMessage(`{"text":"x"}`)}
		if _, err := f.do(req); err != nil {
			t.Fatal(err)
		}
		_, err := f.do(req)
		ge := gwErr(t, err, tool.ClassBudgetExceeded)
		if ge.Details["scope"] != "session" {
			t.Errorf("details %v, want the session scope", ge.Details)
		}
		if f.used("caller", "alice") != 1 || f.used("session", "s1") != 1 {
			t.Errorf("a refused call kept part of its reservation: caller %d session %d", f.used("caller", "alice"), f.used("session", "s1"))
		}
	})
}

func TestBudgetConcurrentCallersNeverOverSpend(t *testing.T) {
	const callers, quota = 64, 20
	cases := []struct {
		name   string
		scope  budget.Scope
		caller func(i int) string
	}{
		{"one session, 64 callers", budget.ScopeSession, func(i int) string { return fmt.Sprintf("agent-%02d", i) }},
		{"one caller, 64 goroutines", budget.ScopeCaller, func(int) string { return "alice" }},
	}
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var rules []policy.Rule
				for i := range callers {
					rules = append(rules, policy.Rule{Caller: tc.caller(i), Allow: []string{"note"}})
				}
				f := newFixture(t, mk, config{Rules: rules, Budgets: []budget.Quota{{Scope: tc.scope, Quota: quota}}})
				note := f.tool("note", nil)
				var wg sync.WaitGroup
				start := make(chan struct{})
				errs := make([]error, callers)
				for i := range callers {
					wg.Go(func() {
						<-start
						_, errs[i] = f.g.Call(context.Background(), gateway.CallRequest{
							Caller: tc.caller(i), Session: "shared", Tool: "note",
							Arguments: json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i)),
						})
					})
				}
				close(start)
				wg.Wait()
				ok, exceeded := 0, 0
				for i, err := range errs {
					switch {
					case err == nil:
						ok++
					default:
						gwErr(t, err, tool.ClassBudgetExceeded)
						exceeded++
						_ = i
					}
				}
				if ok != quota || exceeded != callers-quota {
					t.Errorf("%d succeeded and %d were refused, want %d and %d", ok, exceeded, quota, callers-quota)
				}
				if got := f.totalUsed(); got != quota {
					t.Errorf("budget used %d, want exactly %d", got, quota)
				}
				if note.Count() != quota || len(f.intents()) != quota {
					t.Errorf("%d invocations and %d intents, want %d", note.Count(), len(f.intents()), quota)
				}
			})
		}
	})
}
