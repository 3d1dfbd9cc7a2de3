package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// TestInvalidResult: a backend's InvalidResultError settles the call
// succeeded (invalid_result) with the result kept, the caller gets every
// violation with its pointer and never the result, and a replay of its
// idempotency key says invalid_result, not that the call did not run.
func TestInvalidResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		raw := json.RawMessage(`{"structuredContent":{"n":"one"},"isError":false}`)
		invoked := 0
		f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			invoked++
			return nil, &tool.InvalidResultError{Result: raw, Err: &inputschema.ErrorList{Errors: []*inputschema.Error{
				{Class: inputschema.ClassValidation, Stage: "result", Message: "must be an integer", Path: "$structuredContent.n", Pointer: "/n", Keyword: "type"},
				{Class: inputschema.ClassValidation, Stage: "result", Message: "required", Path: "$structuredContent", Pointer: "", Keyword: "required"},
			}}}
		})
		_, err := f.do(keyed("alice", "k1", `{"text":"x"}`))
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Class != tool.ClassInvalidResult || ge.Step != "invoke" || ge.Pointer != "/n" || len(ge.Errors) != 2 {
			t.Fatalf("%v, want invalid_result at invoke with both violations", err)
		}
		if !errors.Is(err, tool.ClassInvalidResult) {
			t.Error("errors.Is(err, ErrInvalidResult) is false")
		}
		in, gerr := f.st.GetIntent(context.Background(), ge.CallID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		r, derr := store.DecodeResult(in.Result)
		if in.Status != store.StatusSucceeded || in.ErrorClass != "invalid_result" || derr != nil || string(r.Content) != string(raw) {
			t.Errorf("journal: %s (%s), result %s (%v); want succeeded (invalid_result) with the raw result", in.Status, in.ErrorClass, in.Result, derr)
		}
		_, err = f.do(keyed("alice", "k1", `{"text":"x"}`))
		if !errors.As(err, &ge) || ge.Class != tool.ClassInvalidResult || ge.Step != "replay" || invoked != 1 {
			t.Errorf("replay: %v (invoked %d), want invalid_result without a second run", err, invoked)
		}
	})
}
