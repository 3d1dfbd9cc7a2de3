// Package storetest is the conformance suite of the store contract: every
// store.Store implementation (memstore, sqlite, postgres) runs it from
// its own tests with
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { ... a fresh, empty store ... })
//	}
//
// The suite checks only what store/store.go promises, never how an
// implementation keeps it, so one suite holds every store to the same
// contract. It is deterministic (concurrent tests assert invariants and exact
// counts that hold under every interleaving) and small: a few hundred commits
// in total, because a durable store syncs each one. It covers every part
// of store.Store (Journal, Approvals, Budgets, Pins) in one run, since the
// parts share transactions: a commit consumes an approval and reserves
// budget.
//
// What the suite requires beyond the wording of store.go, and why:
//
//   - Times round-trip as the same instant to the millisecond, whatever the
//     location of the time.Time given (compared in UTC, truncated to the
//     millisecond). The suite only ever stores whole milliseconds, so a
//     store keeping milliseconds and one keeping nanoseconds both pass;
//     one keeping seconds, or the wall clock without its offset, does not.
//   - Unset times (SettledAt of a started intent, DecidedAt of a pending
//     approval) read back as the zero time.
//   - Byte fields (Arguments, Result) round-trip byte for byte, and no later
//     change to a slice given to or returned by the store alters what it
//     holds.
//   - Expiry is judged on the times the caller passes (the intent's
//     CreatedAt for consuming an approval, the decision's At, the now
//     argument), never on the store's own clock: the gateway's clock is
//     injectable, and the store must agree with it.
//   - ResolveIntent records its time in SettledAt, the only time field an
//     intent has for it.
//   - ListIntents orders by commit order, newest first; the suite commits
//     in CreatedAt order, so ordering by CreatedAt passes too.
//   - An empty idempotency key is no key: any number of intents may have it.
//   - The empty string is a budget key like any other (budget.Plan counts
//     calls without a session against the session key "").
//   - A failed call of a mutating method changes nothing.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// Run runs the whole conformance suite, each test as a subtest with a fresh,
// empty store from open (which registers its own cleanup, such as Close and
// removing files). Run includes RunConcurrency.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	runAll(t, open, []namedTest{
		{"Intent/RoundTrip", testIntentRoundTrip},
		{"Intent/StoreSetsStatusAndIncarnation", testStoreSetsStatusAndIncarnation},
		{"Intent/NotFound", testIntentNotFound},
		{"Intent/NoAliasing", testIntentNoAliasing},
		{"Intent/DuplicateCallID", testDuplicateCallID},
		{"Intent/ClientInfo", testIntentClientInfo},
		{"Idempotency/DuplicateKey", testDuplicateKey},
		{"Idempotency/DuplicateKeyReturnsSettledOutcome", testDuplicateKeyReturnsSettled},
		{"Idempotency/OtherCallerSameKey", testOtherCallerSameKey},
		{"Idempotency/EmptyKeyIsNoKey", testEmptyKeyIsNoKey},
		{"Budget/UpToQuota", testBudgetUpToQuota},
		{"Budget/ExceededWritesNothing", testBudgetExceededWritesNothing},
		{"Budget/SingleReservationAboveQuota", testBudgetSingleAboveQuota},
		{"Budget/QuotaInForceIsTheRequests", testBudgetQuotaInForce},
		{"Budget/MultipleReservationsAllOrNothing", testBudgetAllOrNothing},
		{"Budget/UsageSums", testBudgetUsageSums},
		{"Budget/EmptyKey", testBudgetEmptyKey},
		{"Budget/ReleaseOnlyWhenProvenNotRun", testBudgetRelease},
		{"Budget/Windows", testBudgetWindows},
		{"Budget/WindowRelease", testBudgetWindowRelease},
		{"Budget/BadWindow", testBudgetBadWindow},
		{"Budget/Reset", testBudgetReset},
		{"Retention/Prune", testPrune},
		{"Retention/PageIntents", testPageIntents},
		{"Refusals/RecordListPrune", testRefusals},
		{"Settle/Outcomes", testSettleOutcomes},
		{"Settle/Once", testSettleOnce},
		{"Settle/Unknown", testSettleUnknown},
		{"Resolve/Verdicts", testResolveVerdicts},
		{"Resolve/OnlyFromUncertain", testResolveOnlyUncertain},
		{"Resolve/Class", testResolveClass},
		{"List/Filters", testListFilters},
		{"List/NewestFirstAndLimit", testListNewestFirstAndLimit},
		{"List/DefaultLimit", testListDefaultLimit},
		{"Recover/LiveIncarnation", testRecoverLive},
		{"Approval/RoundTrip", testApprovalRoundTrip},
		{"Approval/NotFound", testApprovalNotFound},
		{"Approval/DuplicateID", testApprovalDuplicateID},
		{"Approval/Decide", testApprovalDecide},
		{"Approval/DecideRefusals", testApprovalDecideRefusals},
		{"Approval/ListByCaller", testApprovalListByCaller},
		{"Approval/Expiry", testApprovalExpiry},
		{"Approval/DecidedOnce", testApprovalDecidedOnce},
		{"Approval/List", testApprovalList},
		{"Approval/Find", testApprovalFind},
		{"Approval/FindNewest", testApprovalFindNewest},
		{"Approval/Open", testApprovalOpen},
		{"Consume/Approved", testConsumeApproved},
		{"Consume/Once", testConsumeOnce},
		{"Consume/Refused", testConsumeRefused},
		{"Consume/AtomicWithBudgetAndKey", testConsumeAtomic},
		{"Pins/FirstSightAccepted", testPinFirstSight},
		{"Pins/ChangeHeldUntilAccepted", testPinChangeHeld},
		{"Pins/AcceptRefusesAnotherHash", testPinAcceptOtherHash},
		{"Credentials/PutGetListDelete", testCredentials},
		{"PendingLogins/AddListTake", testPendingLogins},
		{"Tasks/RoundTrip", testTaskRoundTrip},
		{"Tasks/OnePerApproval", testTaskOnePerApproval},
		{"Tasks/Moves", testTaskMoves},
		{"Tasks/Prune", testTaskPrune},
		{"PendingLogins/Prune", testLoginPrune},
		{"Tasks/Lease", testTaskLease},
		{"Tasks/Due", testTaskDue},
	})
	RunConcurrency(t, open)
}

// RunConcurrency runs the tests that race many goroutines against one store:
// quotas, idempotency keys, approvals, decisions and settlements each taken
// exactly once. Run calls it; it is exported to run the heavy part alone.
func RunConcurrency(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	runAll(t, open, []namedTest{
		{"Concurrency/QuotaNeverOverspent", testConcQuota},
		{"Concurrency/TwoScopesNeverOverspent", testConcTwoScopes},
		{"Concurrency/SameIdempotencyKey", testConcSameKey},
		{"Concurrency/ApprovalConsumedOnce", testConcApprovalOnce},
		{"Concurrency/ApprovalOpenedOnce", testConcApprovalOpenedOnce},
		{"Concurrency/DecidedOnce", testConcDecideOnce},
		{"Concurrency/SettledOnce", testConcSettleOnce},
		{"Concurrency/ResolvedOnce", testConcResolveOnce},
		{"Concurrency/ReleaseWhileReserving", testConcReleaseWhileReserving},
		{"Concurrency/TaskClaimedOnce", testConcTaskClaimedOnce},
		{"Concurrency/LoginTakenOnce", testConcLoginTakenOnce},
	})
}

type namedTest struct {
	name string
	fn   func(f *fixture)
}

func runAll(t *testing.T, open func(t *testing.T) store.Store, tests []namedTest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			if s == nil {
				t.Fatal("open returned a nil store")
			}
			tc.fn(&fixture{t: t, s: s, ctx: t.Context(), base: time.Now().UTC().Truncate(time.Millisecond)})
		})
	}
}

// fixture is one test's store and the helpers that build requests for it.
type fixture struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
	// base is the real time at the start of the test, whole milliseconds.
	base time.Time
	n    int // intents and approvals made, for unique ids and times
}

const (
	hour = time.Hour
	ms   = time.Millisecond
)

// intent returns a fresh intent request for caller and tool: a unique call
// id and a CreatedAt one millisecond after the previous one, so creation
// order is commit order.
func (f *fixture) intent(caller, tool string) store.Intent {
	f.n++
	args := fmt.Sprintf(`{"n": %d , "s":"é\u00e9"}`, f.n)
	return store.Intent{
		CallID:         fmt.Sprintf("call-%03d", f.n),
		Caller:         caller,
		Tool:           tool,
		DefinitionHash: "sha256:def-" + tool,
		Arguments:      []byte(args),
		ArgsDigest:     fmt.Sprintf("sha256:args-%03d", f.n),
		CreatedAt:      f.base.Add(time.Duration(f.n) * ms),
	}
}

// req wraps an intent with reservations.
func req(in store.Intent, rs ...budget.Reservation) *store.CommitRequest {
	return &store.CommitRequest{Intent: in, Reservations: rs}
}

func res(scope, key string, quota, amount int64) budget.Reservation {
	return budget.Reservation{Scope: scope, Key: key, Quota: quota, Amount: amount}
}

// commit commits r and fails the test on any error.
func (f *fixture) commit(r *store.CommitRequest) {
	f.t.Helper()
	existing, err := f.s.CommitIntent(f.ctx, r)
	if err != nil {
		f.t.Fatalf("CommitIntent(%s): %v", r.Intent.CallID, err)
	}
	if existing != nil {
		f.t.Errorf("CommitIntent(%s) succeeded but returned an existing intent %s", r.Intent.CallID, existing.CallID)
	}
}

// commitNew commits a fresh intent of caller/tool with reservations and
// returns it.
func (f *fixture) commitNew(caller, tool string, rs ...budget.Reservation) store.Intent {
	f.t.Helper()
	in := f.intent(caller, tool)
	f.commit(req(in, rs...))
	return in
}

func (f *fixture) get(callID string) *store.Intent {
	f.t.Helper()
	in, err := f.s.GetIntent(f.ctx, callID)
	if err != nil {
		f.t.Fatalf("GetIntent(%s): %v", callID, err)
	}
	if in == nil {
		f.t.Fatalf("GetIntent(%s) returned nil without error", callID)
	}
	return in
}

func (f *fixture) status(callID string) store.Status {
	f.t.Helper()
	return f.get(callID).Status
}

func (f *fixture) settle(callID string, st store.Status) {
	f.t.Helper()
	if err := f.s.Settle(f.ctx, callID, store.Settlement{Status: st, At: f.base.Add(hour / 2)}); err != nil {
		f.t.Fatalf("Settle(%s, %s): %v", callID, st, err)
	}
}

// uncertain commits a fresh intent holding reservations and settles it
// uncertain.
func (f *fixture) uncertain(caller, tool string, rs ...budget.Reservation) store.Intent {
	f.t.Helper()
	in := f.commitNew(caller, tool, rs...)
	f.settle(in.CallID, store.StatusUncertain)
	return in
}

// absent asserts that no intent with callID was written.
func (f *fixture) absent(callID string) {
	f.t.Helper()
	in, err := f.s.GetIntent(f.ctx, callID)
	if !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("GetIntent(%s) = %v, %v; want ErrNotFound (nothing written)", callID, in, err)
	}
}

type usageKey struct{ scope, key string }

// usage returns BudgetUsage as a map, without zero entries (a store may list
// a (scope, key) whose budget was all released, or leave it out). It fails on
// duplicate or negative entries.
func (f *fixture) usage() map[usageKey]int64 {
	f.t.Helper()
	us, err := f.s.BudgetUsage(f.ctx)
	if err != nil {
		f.t.Fatalf("BudgetUsage: %v", err)
	}
	out := map[usageKey]int64{}
	seen := map[usageKey]bool{}
	for _, u := range us {
		k := usageKey{u.Scope, u.Key}
		if seen[k] {
			f.t.Errorf("BudgetUsage lists (%s, %q) twice", u.Scope, u.Key)
		}
		seen[k] = true
		if u.Used < 0 {
			f.t.Errorf("BudgetUsage (%s, %q) = %d: negative", u.Scope, u.Key, u.Used)
		}
		if u.Used != 0 {
			out[k] = u.Used
		}
	}
	return out
}

// wantUsage asserts the budget held per (scope, key); want lists
// scope, key, used triples, every other (scope, key) must hold nothing.
func (f *fixture) wantUsage(want map[usageKey]int64) {
	f.t.Helper()
	got := f.usage()
	for k, w := range want {
		if got[k] != w {
			f.t.Errorf("budget used in (%s, %q) = %d, want %d", k.scope, k.key, got[k], w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			f.t.Errorf("budget used in (%s, %q) = %d, want 0", k.scope, k.key, g)
		}
	}
}

// approval creates a pending approval for the exact call in, created now
// and expiring in an hour.
func (f *fixture) approval(in store.Intent) *store.Approval {
	f.t.Helper()
	f.n++
	a := &store.Approval{
		ID:             fmt.Sprintf("apr-%03d", f.n),
		Caller:         in.Caller,
		Session:        in.Session,
		Tool:           in.Tool,
		DefinitionHash: in.DefinitionHash,
		ArgsDigest:     in.ArgsDigest,
		Status:         store.ApprovalPending,
		CreatedAt:      f.base.Add(time.Duration(f.n) * ms),
		ExpiresAt:      f.base.Add(hour),
	}
	if err := f.s.CreateApproval(f.ctx, a); err != nil {
		f.t.Fatalf("CreateApproval(%s): %v", a.ID, err)
	}
	return a
}

// decide decides approval id by a reviewer, now.
func (f *fixture) decide(id string, approve bool) {
	f.t.Helper()
	if err := f.s.DecideApproval(f.ctx, id, store.ApprovalDecision{Approve: approve, By: "reviewer", At: f.base.Add(ms)}); err != nil {
		f.t.Fatalf("DecideApproval(%s, %v): %v", id, approve, err)
	}
}

// approved creates an approval for in and approves it.
func (f *fixture) approved(in store.Intent) *store.Approval {
	f.t.Helper()
	a := f.approval(in)
	f.decide(a.ID, true)
	return a
}

func (f *fixture) getApproval(id string) *store.Approval {
	f.t.Helper()
	a, err := f.s.GetApproval(f.ctx, id)
	if err != nil {
		f.t.Fatalf("GetApproval(%s): %v", id, err)
	}
	if a == nil {
		f.t.Fatalf("GetApproval(%s) returned nil without error", id)
	}
	return a
}

// wantErr asserts errors.Is(err, target).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want %v", what, err, target)
	}
}

// wantBudgetError asserts err is a *store.BudgetError with these figures
// that also matches store.ErrBudgetExceeded.
func wantBudgetError(t *testing.T, what string, err error, want store.BudgetError) {
	t.Helper()
	var be *store.BudgetError
	if !errors.As(err, &be) {
		t.Errorf("%s: error %v, want a *store.BudgetError", what, err)
		return
	}
	if !errors.Is(err, store.ErrBudgetExceeded) {
		t.Errorf("%s: error %v does not match store.ErrBudgetExceeded", what, err)
	}
	if *be != want {
		t.Errorf("%s: BudgetError %+v, want %+v", what, *be, want)
	}
}

// sameInstant reports whether a and b are the same instant to the
// millisecond (see the package comment).
func sameInstant(a, b time.Time) bool {
	return a.UTC().Truncate(ms).Equal(b.UTC().Truncate(ms))
}

func wantTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if want.IsZero() {
		if !got.IsZero() {
			t.Errorf("%s = %v, want the zero time", what, got)
		}
		return
	}
	if !sameInstant(got, want) {
		t.Errorf("%s = %v, want %v (same instant to the millisecond)", what, got, want)
	}
}

func wantBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// wantIntent compares every field of got with want.
func wantIntent(t *testing.T, got *store.Intent, want store.Intent) {
	t.Helper()
	if got == nil {
		t.Errorf("intent %s: got nil", want.CallID)
		return
	}
	str := func(field, g, w string) {
		t.Helper()
		if g != w {
			t.Errorf("intent %s: %s = %q, want %q", want.CallID, field, g, w)
		}
	}
	str("CallID", got.CallID, want.CallID)
	str("Caller", got.Caller, want.Caller)
	str("Session", got.Session, want.Session)
	str("Tool", got.Tool, want.Tool)
	str("DefinitionHash", got.DefinitionHash, want.DefinitionHash)
	str("ArgsDigest", got.ArgsDigest, want.ArgsDigest)
	str("IdempotencyKey", got.IdempotencyKey, want.IdempotencyKey)
	str("ApprovalID", got.ApprovalID, want.ApprovalID)
	str("Incarnation", got.Incarnation, want.Incarnation)
	str("Status", string(got.Status), string(want.Status))
	str("ErrorClass", got.ErrorClass, want.ErrorClass)
	str("ErrorMessage", got.ErrorMessage, want.ErrorMessage)
	str("ResolvedBy", got.ResolvedBy, want.ResolvedBy)
	str("ClientInfo", got.ClientInfo, want.ClientInfo)
	str("ProtocolVersion", got.ProtocolVersion, want.ProtocolVersion)
	wantBytes(t, "intent "+want.CallID+": Arguments", got.Arguments, want.Arguments)
	wantBytes(t, "intent "+want.CallID+": Result", got.Result, want.Result)
	wantBytes(t, "intent "+want.CallID+": ErrorDetail", got.ErrorDetail, want.ErrorDetail)
	wantTime(t, "intent "+want.CallID+": CreatedAt", got.CreatedAt, want.CreatedAt)
	wantTime(t, "intent "+want.CallID+": SettledAt", got.SettledAt, want.SettledAt)
}

// stored is what the store should hold for a freshly committed in.
func (f *fixture) stored(in store.Intent) store.Intent {
	in.Status = store.StatusStarted
	in.Incarnation = f.s.Incarnation()
	return in
}
