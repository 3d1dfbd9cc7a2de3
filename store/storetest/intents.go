package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// The journal: what CommitIntent writes and the reads that return it.

func testIntentRoundTrip(f *fixture) {
	t := f.t
	// A time in another zone, with milliseconds: the store must keep the
	// instant, not the wall clock.
	zone := time.FixedZone("UTC+2", 2*60*60)
	in := f.intent("alice", "note")
	in.Session = "sess-1"
	in.IdempotencyKey = "key-1"
	// Arguments exactly as received: odd spacing, key order, escapes,
	// non-ASCII, a number a decoder would rewrite.
	in.Arguments = []byte("{ \"z\" :[1, 2.50,1e2, \"\\u00e9é\\n\\\"\"],\n\t\"a\":null , \"a2\": {} }")
	in.CreatedAt = time.Date(2026, 3, 4, 7, 6, 7, 123_000_000, zone)
	f.commit(req(in))

	want := f.stored(in)
	got := f.get(in.CallID)
	wantIntent(t, got, want)
	if got.Incarnation == "" {
		t.Error("Incarnation of a committed intent is empty")
	}
	if !got.CreatedAt.Equal(time.Date(2026, 3, 4, 5, 6, 7, 123_000_000, time.UTC)) {
		t.Errorf("CreatedAt = %v, want 2026-03-04T05:06:07.123Z", got.CreatedAt)
	}

	byKey, err := f.s.GetIntentByKey(f.ctx, "alice", "key-1")
	if err != nil {
		t.Fatalf("GetIntentByKey: %v", err)
	}
	wantIntent(t, byKey, want)
}

// testIntentClientInfo: the client's name/version and protocol version are
// kept with the intent, alone and in a group of concurrent commits, through
// its settlement, and by every read; an intent without them reads "".
func testIntentClientInfo(f *fixture) {
	t := f.t
	var ins []store.Intent
	for i := range 8 {
		in := f.intent("alice", "note")
		in.ClientInfo, in.ProtocolVersion = fmt.Sprintf("claude-code/2.%d", i), "2026-07-28"
		ins = append(ins, in)
	}
	plain := f.intent("alice", "note")
	ins = append(ins, plain)
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Go(func() {
			if _, err := f.s.CommitIntent(f.ctx, req(in)); err != nil {
				t.Errorf("CommitIntent(%s): %v", in.CallID, err)
			}
		})
	}
	wg.Wait()
	for i, in := range ins {
		if i%2 == 0 {
			f.settle(in.CallID, store.StatusSucceeded)
		}
		got := f.get(in.CallID)
		if got.ClientInfo != in.ClientInfo || got.ProtocolVersion != in.ProtocolVersion {
			t.Errorf("intent %s: client %q, protocol %q; want %q, %q", in.CallID, got.ClientInfo, got.ProtocolVersion, in.ClientInfo, in.ProtocolVersion)
		}
	}
	l, err := f.s.ListIntents(f.ctx, store.IntentFilter{Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, in := range ins {
		want[in.CallID] = in.ClientInfo + " " + in.ProtocolVersion
	}
	for _, in := range l {
		if w, ok := want[in.CallID]; ok && in.ClientInfo+" "+in.ProtocolVersion != w {
			t.Errorf("listed intent %s: client %q, protocol %q; want %q", in.CallID, in.ClientInfo, in.ProtocolVersion, w)
		}
	}
}

func testStoreSetsStatusAndIncarnation(f *fixture) {
	t := f.t
	inc := f.s.Incarnation()
	if inc == "" {
		t.Fatal("Incarnation() is empty")
	}
	if f.s.Incarnation() != inc {
		t.Fatal("Incarnation() changes between calls")
	}
	// Whatever the request says, the store records started and its own
	// incarnation.
	in := f.intent("alice", "note")
	in.Status = store.StatusSucceeded
	in.Incarnation = "not-" + inc
	f.commit(req(in))
	got := f.get(in.CallID)
	if got.Status != store.StatusStarted {
		t.Errorf("Status = %q, want started", got.Status)
	}
	if got.Incarnation != inc {
		t.Errorf("Incarnation = %q, want the store's %q", got.Incarnation, inc)
	}
	if !got.SettledAt.IsZero() {
		t.Errorf("SettledAt of a started intent = %v, want zero", got.SettledAt)
	}
	// It is this incarnation's own, so it can settle it.
	f.settle(in.CallID, store.StatusSucceeded)
}

func testIntentNotFound(f *fixture) {
	t := f.t
	_, err := f.s.GetIntent(f.ctx, "no-such-call")
	wantErr(t, "GetIntent(unknown)", err, store.ErrNotFound)
	_, err = f.s.GetIntentByKey(f.ctx, "alice", "no-such-key")
	wantErr(t, "GetIntentByKey(unknown) on an empty store", err, store.ErrNotFound)

	in := f.intent("alice", "note")
	in.IdempotencyKey = "k"
	f.commit(req(in))
	_, err = f.s.GetIntentByKey(f.ctx, "alice", "other-key")
	wantErr(t, "GetIntentByKey(alice, other key)", err, store.ErrNotFound)
	_, err = f.s.GetIntentByKey(f.ctx, "bob", "k")
	wantErr(t, "GetIntentByKey(bob, alice's key)", err, store.ErrNotFound)
}

// No later change to a slice given to or returned by the store alters what
// it holds.
func testIntentNoAliasing(f *fixture) {
	t := f.t
	in := f.intent("alice", "note")
	in.IdempotencyKey = "k"
	orig := append([]byte(nil), in.Arguments...)
	r := req(in)
	f.commit(r)
	clear(r.Intent.Arguments)
	clear(in.Arguments)
	wantBytes(t, "Arguments after the request's buffer changed", f.get(in.CallID).Arguments, orig)

	got := f.get(in.CallID)
	clear(got.Arguments)
	wantBytes(t, "Arguments after a returned buffer changed", f.get(in.CallID).Arguments, orig)

	result := []byte(`{"ok":true}`)
	if err := f.s.Settle(f.ctx, in.CallID, store.Settlement{Status: store.StatusSucceeded, Result: result, At: f.base}); err != nil {
		t.Fatal(err)
	}
	clear(result)
	wantBytes(t, "Result after the settlement's buffer changed", f.get(in.CallID).Result, []byte(`{"ok":true}`))
	got = f.get(in.CallID)
	clear(got.Result)
	wantBytes(t, "Result after a returned buffer changed", f.get(in.CallID).Result, []byte(`{"ok":true}`))

	byKey, err := f.s.GetIntentByKey(f.ctx, "alice", "k")
	if err != nil {
		t.Fatal(err)
	}
	clear(byKey.Arguments)
	clear(byKey.Result)
	dup := f.intent("alice", "note")
	dup.IdempotencyKey = "k"
	existing, err := f.s.CommitIntent(f.ctx, req(dup))
	if !errors.Is(err, store.ErrDuplicateKey) || existing == nil {
		t.Fatalf("duplicate key: %v, %v; want ErrDuplicateKey and the existing intent", existing, err)
	}
	clear(existing.Arguments)
	clear(existing.Result)
	list, err := f.s.ListIntents(f.ctx, store.IntentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list {
		clear(list[i].Arguments)
		clear(list[i].Result)
	}
	got = f.get(in.CallID)
	wantBytes(t, "Arguments after returned buffers changed", got.Arguments, orig)
	wantBytes(t, "Result after returned buffers changed", got.Result, []byte(`{"ok":true}`))
}

// Reservations are idempotent by call id: committing a call id again never
// takes its budget twice nor replaces the recorded intent.
func testDuplicateCallID(f *fixture) {
	t := f.t
	in := f.intent("alice", "note")
	f.commit(req(in, res("caller", "alice", 10, 1)))
	again := in
	again.Arguments = []byte(`{"other":true}`)
	again.ArgsDigest = "sha256:other"
	_, _ = f.s.CommitIntent(f.ctx, req(again, res("caller", "alice", 10, 2)))
	wantIntent(t, f.get(in.CallID), f.stored(in))
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 1})
}

func testDuplicateKey(f *fixture) {
	t := f.t
	first := f.intent("alice", "note")
	first.IdempotencyKey = "k1"
	f.commit(req(first, res("caller", "alice", 10, 1)))

	second := f.intent("alice", "note")
	second.IdempotencyKey = "k1"
	second.Arguments = []byte(`{"different":1}`)
	existing, err := f.s.CommitIntent(f.ctx, req(second, res("caller", "alice", 10, 1)))
	wantErr(t, "second commit with the same caller and key", err, store.ErrDuplicateKey)
	if existing == nil {
		t.Fatal("ErrDuplicateKey without the existing intent")
	}
	wantIntent(t, existing, f.stored(first))
	// The refused commit wrote nothing.
	f.absent(second.CallID)
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 1})
	byKey, err := f.s.GetIntentByKey(f.ctx, "alice", "k1")
	if err != nil {
		t.Fatalf("GetIntentByKey: %v", err)
	}
	wantIntent(t, byKey, f.stored(first))
}

// A repeated key returns the recorded outcome (the gateway replays it).
func testDuplicateKeyReturnsSettled(f *fixture) {
	t := f.t
	first := f.intent("alice", "note")
	first.IdempotencyKey = "k1"
	f.commit(req(first))
	at := f.base.Add(5 * time.Second)
	st := store.Settlement{Status: store.StatusSucceeded, Result: []byte(`{"ok": true}`), ErrorClass: "", At: at}
	if err := f.s.Settle(f.ctx, first.CallID, st); err != nil {
		t.Fatal(err)
	}
	want := f.stored(first)
	want.Status, want.Result, want.SettledAt = store.StatusSucceeded, st.Result, at

	second := f.intent("alice", "note")
	second.IdempotencyKey = "k1"
	existing, err := f.s.CommitIntent(f.ctx, req(second))
	wantErr(t, "commit with a settled intent's key", err, store.ErrDuplicateKey)
	wantIntent(t, existing, want)
	f.absent(second.CallID)
	byKey, err := f.s.GetIntentByKey(f.ctx, "alice", "k1")
	if err != nil {
		t.Fatal(err)
	}
	wantIntent(t, byKey, want)
}

func testOtherCallerSameKey(f *fixture) {
	t := f.t
	a := f.intent("alice", "note")
	a.IdempotencyKey = "shared"
	f.commit(req(a))
	b := f.intent("bob", "note")
	b.IdempotencyKey = "shared"
	f.commit(req(b))
	for _, in := range []store.Intent{a, b} {
		got, err := f.s.GetIntentByKey(f.ctx, in.Caller, "shared")
		if err != nil {
			t.Fatalf("GetIntentByKey(%s): %v", in.Caller, err)
		}
		wantIntent(t, got, f.stored(in))
	}
}

func testEmptyKeyIsNoKey(f *fixture) {
	for range 3 {
		f.commitNew("alice", "note") // IdempotencyKey ""
	}
	list, err := f.s.ListIntents(f.ctx, store.IntentFilter{Caller: "alice"})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(list) != 3 {
		f.t.Errorf("%d intents without a key, want 3", len(list))
	}
}

func testSettleOutcomes(f *fixture) {
	t := f.t
	cases := []store.Settlement{
		{Status: store.StatusSucceeded, Result: []byte("{\"content\" : [ {\"type\":\"text\",\"text\":\"é\"} ],\"isError\":false}")},
		{Status: store.StatusSucceeded, Result: []byte(`{"isError":true}`), ErrorClass: "tool_error", ErrorMessage: "the tool said no"},
		{Status: store.StatusSucceeded, Result: []byte(`{"content":[]}`), ErrorClass: "invalid_result", ErrorMessage: "2 violations",
			ErrorDetail: []byte(`{"errors":[{"pointer":"/a"},{"pointer":"/b"}],"details":{"é":true}}`)},
		{Status: store.StatusFailed, ErrorClass: "execution_failure", ErrorMessage: "exec: no such file"},
		{Status: store.StatusFailed, ErrorClass: "input_required", ErrorMessage: "asked", ErrorDetail: []byte(`{"details":{"server":"up"}}`)},
		{Status: store.StatusUncertain, ErrorClass: "timeout", ErrorMessage: "no answer within 5s"},
	}
	for i, st := range cases {
		in := f.commitNew("alice", "note")
		st.At = f.base.Add(time.Duration(i+1) * time.Second).Add(7 * time.Millisecond)
		if err := f.s.Settle(f.ctx, in.CallID, st); err != nil {
			t.Fatalf("Settle(%s, %s): %v", in.CallID, st.Status, err)
		}
		want := f.stored(in)
		want.Status, want.Result, want.ErrorClass, want.ErrorMessage, want.SettledAt = st.Status, st.Result, st.ErrorClass, st.ErrorMessage, st.At
		want.ErrorDetail = st.ErrorDetail
		wantIntent(t, f.get(in.CallID), want)
	}
	// Settled at once (a store may settle them as one group), each keeps
	// its own detail.
	ins := make([]store.Intent, 8)
	for i := range ins {
		ins[i] = f.commitNew("alice", "note")
	}
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() {
			st := store.Settlement{Status: store.StatusSucceeded, Result: []byte(`{}`), At: f.base.Add(time.Minute)}
			if i%2 == 1 {
				st.ErrorClass, st.ErrorMessage, st.ErrorDetail = "invalid_result", "no", fmt.Appendf(nil, `{"n":%d}`, i)
			}
			if err := f.s.Settle(f.ctx, in.CallID, st); err != nil {
				t.Errorf("Settle(%s): %v", in.CallID, err)
			}
		})
	}
	wg.Wait()
	for i, in := range ins {
		got := f.get(in.CallID)
		want := ""
		if i%2 == 1 {
			want = fmt.Sprintf(`{"n":%d}`, i)
		}
		if string(got.ErrorDetail) != want {
			t.Errorf("settled together: intent %d's ErrorDetail = %q, want %q", i, got.ErrorDetail, want)
		}
	}
}

// An intent leaves started exactly once.
func testSettleOnce(f *fixture) {
	t := f.t
	for _, first := range []store.Status{store.StatusSucceeded, store.StatusFailed, store.StatusUncertain} {
		in := f.commitNew("alice", "note", res("caller", "alice", 100, 1))
		f.settle(in.CallID, first)
		before := f.get(in.CallID)
		usage := f.usage()
		for _, second := range []store.Status{store.StatusSucceeded, store.StatusFailed, store.StatusUncertain} {
			err := f.s.Settle(f.ctx, in.CallID, store.Settlement{Status: second, Result: []byte(`{"x":1}`), ErrorClass: "x", At: f.base.Add(hour)})
			wantErr(t, "Settle("+string(second)+") after "+string(first), err, store.ErrNotStarted)
		}
		wantIntent(t, f.get(in.CallID), *before)
		f.wantUsage(usage)
	}
	// Nor after an operator's resolution.
	in := f.uncertain("alice", "note")
	if err := f.s.ResolveIntent(f.ctx, in.CallID, true, "operator", f.base.Add(hour)); err != nil {
		t.Fatal(err)
	}
	err := f.s.Settle(f.ctx, in.CallID, store.Settlement{Status: store.StatusFailed, At: f.base.Add(hour)})
	wantErr(t, "Settle after ResolveIntent", err, store.ErrNotStarted)
	if got := f.status(in.CallID); got != store.StatusExecuted {
		t.Errorf("status %s after a refused Settle, want executed", got)
	}
}

func testSettleUnknown(f *fixture) {
	err := f.s.Settle(f.ctx, "no-such-call", store.Settlement{Status: store.StatusSucceeded, At: f.base})
	if err == nil {
		f.t.Error("Settle of an unknown call id succeeded")
	}
	f.absent("no-such-call")
}

func testResolveVerdicts(f *fixture) {
	t := f.t
	for _, executed := range []bool{true, false} {
		in := f.intent("alice", "note")
		f.commit(req(in))
		st := store.Settlement{Status: store.StatusUncertain, ErrorClass: "timeout", ErrorMessage: "no answer", At: f.base.Add(time.Second)}
		if err := f.s.Settle(f.ctx, in.CallID, st); err != nil {
			t.Fatal(err)
		}
		at := f.base.Add(2 * hour).Add(3 * time.Millisecond)
		if err := f.s.ResolveIntent(f.ctx, in.CallID, executed, "operator-1", at); err != nil {
			t.Fatalf("ResolveIntent(%v): %v", executed, err)
		}
		got := f.get(in.CallID)
		want := store.StatusExecuted
		if !executed {
			want = store.StatusNotExecuted
		}
		if got.Status != want {
			t.Errorf("status after ResolveIntent(%v) = %s, want %s", executed, got.Status, want)
		}
		if got.ResolvedBy != "operator-1" {
			t.Errorf("ResolvedBy = %q, want operator-1", got.ResolvedBy)
		}
		// The resolution's time is the only time the intent can carry it in.
		wantTime(t, "SettledAt after ResolveIntent", got.SettledAt, at)
		// Its class says what the verdict found (store.ResolvedClass), its
		// message still why it was uncertain.
		if wantClass := store.ResolvedClass(executed, "timeout"); got.ErrorClass != wantClass || got.ErrorMessage != "no answer" {
			t.Errorf("after ResolveIntent(%v): class %q, message %q; want %q and the settlement's message", executed, got.ErrorClass, got.ErrorMessage, wantClass)
		}
		if !got.Status.Terminal() {
			t.Errorf("status %s after resolution is not terminal", got.Status)
		}
		// The rest of the record is untouched.
		wantBytes(t, "Arguments after ResolveIntent", got.Arguments, in.Arguments)
		if got.CallID != in.CallID || got.Caller != in.Caller || got.Tool != in.Tool || got.ArgsDigest != in.ArgsDigest {
			t.Errorf("ResolveIntent changed the intent's identity: %+v", got)
		}
	}
}

// testResolveClass: an uncertain intent of unknown outcome, resolved,
// says what the operator found: executed, no error class (it ran);
// not executed, execution_failure (proven not run), as store.ResolvedClass
// says; the message (why it was uncertain) and who resolved it are kept.
func testResolveClass(f *fixture) {
	t := f.t
	for _, executed := range []bool{true, false} {
		in := f.commitNew("alice", "note")
		const msg = "the connection broke (the outcome is unknown)"
		st := store.Settlement{Status: store.StatusUncertain, ErrorClass: "unknown_outcome", ErrorMessage: msg, At: f.base.Add(time.Second)}
		if err := f.s.Settle(f.ctx, in.CallID, st); err != nil {
			t.Fatal(err)
		}
		if err := f.s.ResolveIntent(f.ctx, in.CallID, executed, "operator-1", f.base.Add(hour)); err != nil {
			t.Fatalf("ResolveIntent(%v): %v", executed, err)
		}
		got := f.get(in.CallID)
		want := map[bool]string{true: "", false: "execution_failure"}[executed]
		if got.ErrorClass != want || got.ErrorClass != store.ResolvedClass(executed, "unknown_outcome") {
			t.Errorf("ResolveIntent(%v) of unknown_outcome: class %q, want %q", executed, got.ErrorClass, want)
		}
		if got.ErrorMessage != msg || got.ResolvedBy != "operator-1" {
			t.Errorf("ResolveIntent(%v): message %q, resolved by %q; want the uncertain settlement's message and operator-1", executed, got.ErrorMessage, got.ResolvedBy)
		}
	}
}

func testResolveOnlyUncertain(f *fixture) {
	t := f.t
	at := f.base.Add(hour)
	started := f.commitNew("alice", "note", res("caller", "alice", 100, 1))
	succeeded := f.commitNew("alice", "note", res("caller", "alice", 100, 1))
	f.settle(succeeded.CallID, store.StatusSucceeded)
	failed := f.commitNew("alice", "note", res("caller", "alice", 100, 1))
	f.settle(failed.CallID, store.StatusFailed)
	resolved := f.uncertain("alice", "note", res("caller", "alice", 100, 1))
	if err := f.s.ResolveIntent(f.ctx, resolved.CallID, false, "operator", at); err != nil {
		t.Fatal(err)
	}
	usage := f.usage()
	for _, c := range []struct {
		in   store.Intent
		want store.Status
	}{
		{started, store.StatusStarted},
		{succeeded, store.StatusSucceeded},
		{failed, store.StatusFailed},
		{resolved, store.StatusNotExecuted},
	} {
		for _, executed := range []bool{true, false} {
			err := f.s.ResolveIntent(f.ctx, c.in.CallID, executed, "operator-2", at)
			wantErr(t, "ResolveIntent of a "+string(c.want)+" intent", err, store.ErrNotUncertain)
		}
		got := f.get(c.in.CallID)
		if got.Status != c.want {
			t.Errorf("status %s after a refused ResolveIntent, want %s", got.Status, c.want)
		}
		if got.ResolvedBy == "operator-2" {
			t.Error("a refused ResolveIntent recorded its resolver")
		}
	}
	// No release by a refused resolution (not_executed must not release twice).
	f.wantUsage(usage)
	if err := f.s.ResolveIntent(f.ctx, "no-such-call", false, "operator", at); err == nil {
		t.Error("ResolveIntent of an unknown call id succeeded")
	}
}

func testListFilters(f *fixture) {
	t := f.t
	a1 := f.commitNew("alice", "note")
	a2 := f.commitNew("alice", "danger")
	b1 := f.commitNew("bob", "note")
	b2 := f.commitNew("bob", "danger")
	a3 := f.commitNew("alice", "note")
	f.settle(a1.CallID, store.StatusSucceeded)
	f.settle(b2.CallID, store.StatusSucceeded)
	f.settle(a2.CallID, store.StatusFailed)
	f.settle(b1.CallID, store.StatusUncertain)

	ids := func(fl store.IntentFilter) []string {
		t.Helper()
		list, err := f.s.ListIntents(f.ctx, fl)
		if err != nil {
			t.Fatalf("ListIntents(%+v): %v", fl, err)
		}
		var out []string
		for _, in := range list {
			out = append(out, in.CallID)
			if fl.Status != "" && in.Status != fl.Status || fl.Caller != "" && in.Caller != fl.Caller || fl.Tool != "" && in.Tool != fl.Tool {
				t.Errorf("ListIntents(%+v) returned %s (%s, %s, %s)", fl, in.CallID, in.Status, in.Caller, in.Tool)
			}
		}
		return out
	}
	// Newest first: a3 was committed last.
	for _, c := range []struct {
		f    store.IntentFilter
		want []string
	}{
		{store.IntentFilter{}, []string{a3.CallID, b2.CallID, b1.CallID, a2.CallID, a1.CallID}},
		{store.IntentFilter{Status: store.StatusSucceeded}, []string{b2.CallID, a1.CallID}},
		{store.IntentFilter{Status: store.StatusStarted}, []string{a3.CallID}},
		{store.IntentFilter{Status: store.StatusUncertain}, []string{b1.CallID}},
		{store.IntentFilter{Status: store.StatusExecuted}, nil},
		{store.IntentFilter{Caller: "alice"}, []string{a3.CallID, a2.CallID, a1.CallID}},
		{store.IntentFilter{Caller: "carol"}, nil},
		{store.IntentFilter{Tool: "danger"}, []string{b2.CallID, a2.CallID}},
		{store.IntentFilter{Caller: "alice", Tool: "note"}, []string{a3.CallID, a1.CallID}},
		{store.IntentFilter{Caller: "alice", Tool: "note", Status: store.StatusSucceeded}, []string{a1.CallID}},
		{store.IntentFilter{Caller: "bob", Status: store.StatusFailed}, nil},
	} {
		if got := ids(c.f); !slices.Equal(got, c.want) {
			t.Errorf("ListIntents(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	// Entries carry what an operator's listing shows.
	list, err := f.s.ListIntents(f.ctx, store.IntentFilter{Status: store.StatusSucceeded, Caller: "alice"})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListIntents: %v, %v", list, err)
	}
	e := list[0]
	if e.CallID != a1.CallID || e.Tool != a1.Tool || e.Caller != a1.Caller || e.ArgsDigest != a1.ArgsDigest || e.Status != store.StatusSucceeded {
		t.Errorf("list entry %+v does not match the intent %s", e, a1.CallID)
	}
	wantTime(t, "list entry CreatedAt", e.CreatedAt, a1.CreatedAt)
	wantTime(t, "list entry SettledAt", e.SettledAt, f.base.Add(hour/2))
}

func testListNewestFirstAndLimit(f *fixture) {
	t := f.t
	var all []string
	for range 7 {
		all = append(all, f.commitNew("alice", "note").CallID)
	}
	newest := func(n int) []string {
		var out []string
		for i := len(all) - 1; i >= 0 && len(out) < n; i-- {
			out = append(out, all[i])
		}
		return out
	}
	for _, limit := range []int{1, 3, 7, 50} {
		list, err := f.s.ListIntents(f.ctx, store.IntentFilter{Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range list {
			got = append(got, in.CallID)
		}
		if want := newest(limit); !slices.Equal(got, want) {
			t.Errorf("ListIntents(Limit %d) = %v, want %v", limit, got, want)
		}
	}
}

// Limit 0 means 100.
func testListDefaultLimit(f *fixture) {
	t := f.t
	// Commit in parallel batches: a durable store shares the syncs.
	var reqs []*store.CommitRequest
	for range 101 {
		reqs = append(reqs, req(f.intent("alice", "note")))
	}
	for i := 0; i < len(reqs); i += 16 {
		errs := parallel(min(16, len(reqs)-i), func(j int) error {
			_, err := f.s.CommitIntent(f.ctx, reqs[i+j])
			return err
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	list, err := f.s.ListIntents(f.ctx, store.IntentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 100 {
		t.Errorf("ListIntents with Limit 0 returned %d of 101 intents, want 100", len(list))
	}
	list, err = f.s.ListIntents(f.ctx, store.IntentFilter{Limit: 101})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 101 {
		t.Errorf("ListIntents with Limit 101 returned %d of 101 intents", len(list))
	}
}

// Recover never marks the intents of a live incarnation, and this store's
// own incarnation is alive.
func testRecoverLive(f *fixture) {
	t := f.t
	n, err := f.s.Recover(f.ctx)
	if err != nil || n != 0 {
		t.Errorf("Recover on an empty store = %d, %v; want 0, nil", n, err)
	}
	a := f.commitNew("alice", "note", res("caller", "alice", 10, 1))
	b := f.commitNew("bob", "note")
	c := f.commitNew("bob", "note")
	f.settle(c.CallID, store.StatusSucceeded)
	for range 2 {
		n, err = f.s.Recover(f.ctx)
		if err != nil || n != 0 {
			t.Errorf("Recover with only a live incarnation = %d, %v; want 0, nil", n, err)
		}
	}
	for _, in := range []store.Intent{a, b} {
		if got := f.status(in.CallID); got != store.StatusStarted {
			t.Errorf("%s is %s after Recover, want started", in.CallID, got)
		}
	}
	if got := f.status(c.CallID); got != store.StatusSucceeded {
		t.Errorf("%s is %s after Recover, want succeeded", c.CallID, got)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 1})
	// Its intents are still its own to settle.
	f.settle(a.CallID, store.StatusSucceeded)
	f.settle(b.CallID, store.StatusFailed)
}
