package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// oldDigests are digests the gateway recorded before its arguments were
// parsed once (validation, then jsonstrict.Decode and DigestValue),
// written down from a run of that code: the same arguments must get the
// same digest now (internal/canonjson's pinned_test.go pins more).
var oldDigests = []struct{ args, digest string }{
	{`{"text":"hello"}`, "v2:cbbbdcd27692344de5dbab3abcaba413fb0f45307267de7081401576df1cb176"},
	{` { "b" : 2 , "a" : [ 1 , 2.50 , -0 , 1e21 , 1E+2 ] } `, "v2:34a4bb7fe4bc419d9d0557a8bc49c0dd6a027d032cdcf95c7cf39b7e5e679fd6"},
	{`{"\u0041":"\u00e9\n\t\"\\\/","a":"é"}`, "v2:668eb3e073487547c06a267ba13c1ab54eeb762e6623d505fbdcaea9d193081d"},
	{`{"\uffff":1,"\ud83d\ude00":2,"z":3,"":4}`, "v2:5831bb3da625ec191307b716945ed6ea1c907c6bcdcc266a6d15e6ee987e5e9a"},
}

// oneParseGateway is a gateway on memstore deciding with a live policy
// of real rules (an ArgsReader: the arguments are built as Go values
// only for a decision that reads them), with the tools any (an open
// object), gated (an approval for alice) and patterned (allowed only
// for a text argument matching a pattern).
func oneParseGateway(t *testing.T) (*gateway.Gateway, store.Store, *int) {
	t.Helper()
	rules, err := policy.Compile([]policy.Rule{
		{Caller: "alice", Allow: []string{"any", "patterned(ok*)"}, Approve: []string{"gated"}},
	}, &policy.Options{MainArgs: map[string]policy.MainArg{"patterned": {Field: "text", Kind: policy.KindText}}})
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	g := gateway.New(&gateway.Options{Store: st, Policy: policy.NewLive(rules)})
	ran := new(int)
	for _, name := range []string{"any", "gated", "patterned"} {
		err := g.Register(context.Background(), tool.Tool{
			Name: name, InputSchema: json.RawMessage(`{"type":"object"}`),
			Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				*ran++
				return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return g, st, ran
}

// The journal records the digests the old code path computed.
func TestOneParseKeepsRecordedDigests(t *testing.T) {
	g, st, _ := oneParseGateway(t)
	for _, c := range oldDigests {
		res, err := g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "any", Arguments: json.RawMessage(c.args)})
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		in, err := st.GetIntent(context.Background(), res.CallID)
		if err != nil {
			t.Fatal(err)
		}
		if in.ArgsDigest != c.digest || string(in.Arguments) != c.args {
			t.Errorf("%s: recorded digest %s (arguments %s), the old code's %s", c.args, in.ArgsDigest, in.Arguments, c.digest)
		}
	}
}

// An approval stored under the old code's digest is found and used by
// the same call now: a stored approval still matches after the upgrade.
func TestOneParseMatchesStoredApproval(t *testing.T) {
	g, st, ran := oneParseGateway(t)
	ctx := context.Background()
	_, defHash, ok := g.Tool("gated")
	if !ok {
		t.Fatal("gated is not registered")
	}
	c := oldDigests[1]
	now := time.Now()
	a := &store.Approval{ID: "apr_old", Caller: "alice", Tool: "gated", DefinitionHash: defHash, ArgsDigest: c.digest,
		Arguments: []byte(c.args), Status: store.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := st.DecideApproval(ctx, a.ID, store.ApprovalDecision{Approve: true, By: "op", At: now}); err != nil {
		t.Fatal(err)
	}
	// The same arguments with another member order and spacing: one digest.
	res, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "gated", Arguments: json.RawMessage(`{"a":[1,2.50,-0,1e21,1E+2],"b":2}`)})
	if err != nil {
		t.Fatalf("the call did not use the stored approval: %v", err)
	}
	if got, err := st.GetApproval(ctx, a.ID); err != nil || got.ConsumedBy != res.CallID || *ran != 1 {
		t.Errorf("approval %+v (%v), call %s, ran %d times: want it consumed by the call", got, err, res.CallID, *ran)
	}
}

// A rule with an argument pattern still decides on the arguments (they
// are built for it), and one without lets the call through untouched.
func TestOneParsePolicyStillReadsArguments(t *testing.T) {
	g, _, ran := oneParseGateway(t)
	ctx := context.Background()
	if _, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "patterned", Arguments: json.RawMessage(`{"text":"okay"}`)}); err != nil {
		t.Errorf("text okay matches ok*: %v", err)
	}
	_, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "patterned", Arguments: json.RawMessage(`{"text":"nope"}`)})
	if ge, ok := err.(*gateway.Error); !ok || ge.Class != tool.ClassForbidden {
		t.Errorf("text nope does not match ok*: got %v, want forbidden", err)
	}
	// Invalid arguments are still refused in the validator's words.
	_, err = g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "any", Arguments: json.RawMessage(`{"a":1,"a":2}`)})
	if ge, ok := err.(*gateway.Error); !ok || ge.Class != tool.ClassValidation || ge.Step != "validate" || len(ge.Errors) != 1 {
		t.Errorf("a duplicate name: got %#v, want one validation error", err)
	}
	if *ran != 1 {
		t.Errorf("the backend ran %d times, want 1", *ran)
	}
}
