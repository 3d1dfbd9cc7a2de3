package gateway_test

// Idempotency keys: a repeated key returns the recorded outcome and never
// invokes again; a call whose outcome is unknown is never re-run.

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func keyed(caller, key, args string) gateway.CallRequest {
	return gateway.CallRequest{Caller: caller, Tool: "note", IdempotencyKey: key, Arguments: json.RawMessage(args)}
}

func TestIdempotentReplay(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		// A quota of 1: the replay must not take budget again.
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1}}})
		result := `{"id": 42,  "note":"kept"}`
		note := f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(result), IsError: true}, nil
		})
		first, err := f.do(keyed("alice", "k1", `{"text":"x","n":2}`))
		if err != nil {
			t.Fatal(err)
		}
		if first.Replayed {
			t.Error("the first call is marked replayed")
		}
		// Same arguments in another member order and spacing.
		second, err := f.do(keyed("alice", "k1", `{ "n":2, "text":"x" }`))
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		if !second.Replayed || second.CallID != first.CallID || !jsonEqual(t, second.Result, first.Result) || !second.IsError {
			t.Errorf("replay %+v (%s), want the recorded %s of %s", second, second.Result, result, first.CallID)
		}
		if note.Count() != 1 || len(f.intents()) != 1 || f.used("caller", "alice") != 1 {
			t.Errorf("%d invocations, %d intents, %d used; want 1, 1, 1", note.Count(), len(f.intents()), f.used("caller", "alice"))
		}
		// Keys are per caller: bob's k1 is his own call.
		if _, err := f.do(keyed("bob", "k1", `{"text":"x","n":2}`)); err != nil {
			t.Errorf("bob's k1: %v", err)
		}
		if note.Count() != 2 {
			t.Errorf("bob's call with the same key did not run")
		}
	})
}

// The replay hands back the bytes the first call returned, as the first call
// did (TestSuccessRunsEachStepOnceInOrder): not a re-encoding of them.
func TestIdempotentReplayIsByteExact(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		result := `{"html": "<b>&amp;</b>",  "n": [1, 2]}`
		f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(result)}, nil
		})
		first, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(first.Result) != result {
			t.Fatalf("first result %s, want %s", first.Result, result)
		}
		second, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(second.Result) != result {
			t.Errorf("replayed result %s, want the recorded bytes %s", second.Result, result)
		}
	})
}

// A replay answers from the journal before the approval step: the recorded
// call needs no second approval, and no new request is made.
func TestIdempotentReplayNeedsNoNewApproval(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		danger := f.tool("danger", nil)
		req := gateway.CallRequest{Caller: "alice", Tool: "danger", IdempotencyKey: "k1", Arguments: json.RawMessage(`{"text":"x"}`)}
		_, err := f.do(req)
		id := gwErr(t, err, tool.ClassApprovalRequired).Details["approval_id"].(string)
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		first, err := f.do(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := f.do(req)
		if err != nil {
			t.Fatalf("replay of an approved call: %v", err)
		}
		if !again.Replayed || again.CallID != first.CallID {
			t.Errorf("replay %+v", again)
		}
		if n := len(f.approvals()); n != 1 || danger.Count() != 1 {
			t.Errorf("%d approval requests, %d invocations; want 1 and 1", n, danger.Count())
		}
	})
}

func TestIdempotencyKeyWithOtherArguments(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		note := f.tool("note", nil)
		first, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.do(keyed("alice", "k1", `{"text":"y"}`))
		ge := gwErr(t, err, tool.ClassResourceConflict)
		if ge.Details["call_id"] != first.CallID {
			t.Errorf("details %v do not name the earlier call %s", ge.Details, first.CallID)
		}
		if note.Count() != 1 || len(f.intents()) != 1 {
			t.Error("the conflicting call ran")
		}
	})
}

func TestIdempotencyKeyWhileRunning(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		started, release := make(chan struct{}), make(chan struct{})
		note := f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			close(started)
			<-release
			return &tool.Result{Content: json.RawMessage(`"done"`)}, nil
		})
		type out struct {
			res *gateway.CallResult
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
			done <- out{res, err}
		}()
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("the first call never reached its backend")
		}
		_, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
		ge := gwErr(t, err, tool.ClassResourceConflict)
		if ge.Details["status"] != string(store.StatusStarted) {
			t.Errorf("details %v, want status started", ge.Details)
		}
		close(release)
		first := <-done
		if first.err != nil || string(first.res.Result) != `"done"` {
			t.Fatalf("first call: %v %+v", first.err, first.res)
		}
		if note.Count() != 1 {
			t.Errorf("backend invoked %d times, want 1", note.Count())
		}
		// Now that it is settled, the key replays.
		again, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
		if err != nil || !again.Replayed || string(again.Result) != `"done"` {
			t.Errorf("after settlement: %v %+v", err, again)
		}
	})
}

// Many calls with one key at once: one invocation; the others replay it or
// conflict with it while it runs.
func TestIdempotencyKeyUnderConcurrency(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		note := f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			time.Sleep(20 * time.Millisecond)
			return &tool.Result{Content: json.RawMessage(`"once"`)}, nil
		})
		const n = 16
		type out struct {
			res *gateway.CallResult
			err error
		}
		outs := make([]out, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				res, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
				outs[i] = out{res, err}
			})
		}
		close(start)
		wg.Wait()
		ran := 0
		for _, o := range outs {
			switch {
			case o.err == nil && !o.res.Replayed:
				ran++
			case o.err == nil:
				if string(o.res.Result) != `"once"` {
					t.Errorf("replayed %s", o.res.Result)
				}
			default:
				gwErr(t, o.err, tool.ClassResourceConflict)
			}
		}
		if ran != 1 || note.Count() != 1 || len(f.intents()) != 1 {
			t.Errorf("%d fresh results, %d invocations, %d intents; want 1 each", ran, note.Count(), len(f.intents()))
		}
	})
}

func TestIdempotencyKeyAfterUncertainOutcome(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		note := f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return nil, errors.New("connection reset after the request was sent")
		})
		_, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
		ge := gwErr(t, err, tool.ClassUnknownOutcome)
		if f.intent(ge.CallID).Status != store.StatusUncertain {
			t.Fatalf("intent %+v, want uncertain", f.intent(ge.CallID))
		}
		for range 2 {
			_, err = f.do(keyed("alice", "k1", `{"text":"x"}`))
			ge2 := gwErr(t, err, tool.ClassResourceConflict)
			if ge2.Details["call_id"] != ge.CallID || ge2.Details["status"] != string(store.StatusUncertain) {
				t.Errorf("details %v", ge2.Details)
			}
		}
		if note.Count() != 1 {
			t.Errorf("backend invoked %d times: an uncertain call was re-run", note.Count())
		}
	})
}

// A call that provably did not run is not re-run under its key either: the
// recorded outcome is the failure.
func TestIdempotencyKeyAfterFailure(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		note := f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return nil, tool.ErrNotStarted
		})
		_, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
		gwErr(t, err, tool.ClassExecutionFailure)
		_, err = f.do(keyed("alice", "k1", `{"text":"x"}`))
		gwErr(t, err, tool.ClassExecutionFailure)
		if note.Count() != 1 {
			t.Errorf("backend invoked %d times", note.Count())
		}
	})
}

// legacyJournal hands back intents as a journal written before argument
// digests were versioned holds them: a bare hex digest.
type legacyJournal struct{ store.Store }

func (s legacyJournal) GetIntentByKey(ctx context.Context, caller, key string) (*store.Intent, error) {
	in, err := s.Store.GetIntentByKey(ctx, caller, key)
	if err == nil {
		in.ArgsDigest = strings.TrimPrefix(in.ArgsDigest, canonjson.DigestVersion)
	}
	return in, err
}

// A retry across the upgrade that changed the digest rule still replays when
// its arguments are the recorded ones, and still conflicts when they differ.
func TestIdempotencyKeyAcrossDigestUpgrade(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Store: legacyJournal{mk(t)}})
		note := f.tool("note", nil)
		first, err := f.do(keyed("alice", "k1", `{"text":"x","n":2}`))
		if err != nil {
			t.Fatal(err)
		}
		second, err := f.do(keyed("alice", "k1", `{ "n":2, "text":"x" }`))
		if err != nil {
			t.Fatalf("retry with the recorded arguments: %v", err)
		}
		if !second.Replayed || second.CallID != first.CallID {
			t.Errorf("retry %+v, want a replay of %s", second, first.CallID)
		}
		for _, other := range []string{`{"text":"x","n":2.0}`, `{"text":"y","n":2}`} {
			_, err = f.do(keyed("alice", "k1", other))
			gwErr(t, err, tool.ClassResourceConflict)
		}
		if note.Count() != 1 {
			t.Errorf("%d invocations, want 1", note.Count())
		}
	})
}
