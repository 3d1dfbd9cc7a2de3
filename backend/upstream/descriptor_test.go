package upstream

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/tool"
)

// TestDescriptorRegisteredWhole: a tool is registered with its descriptor
// as the server sent it (every member: title, icons, outputSchema, every
// annotation, execution, _meta, one no version of the protocol has), and
// destructiveHint true beside readOnlyHint true costs the approval.
func TestDescriptorRegisteredWhole(t *testing.T) {
	t.Setenv("MCPTEST_FULL", "1")
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	e.connect(t, srv, nil)
	full, _, ok := e.g.Tool("go.full")
	if !ok {
		t.Fatal("go.full is not registered")
	}
	var got, want any
	if err := json.Unmarshal(full.Descriptor, &got); err != nil {
		t.Fatalf("descriptor %s: %v", full.Descriptor, err)
	}
	json.Unmarshal([]byte(fullTools["full"]), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("descriptor\n%s\nwant\n%s", full.Descriptor, fullTools["full"])
	}
	if full.Safety != (tool.Safety{ReadOnly: true, Idempotent: true}) {
		t.Errorf("full: %+v, want read-only and idempotent", full.Safety)
	}
	d, _, _ := e.g.Tool("go.full_destructive")
	if d.Safety.ReadOnly || !d.Safety.RequiresApproval {
		t.Errorf("full_destructive (readOnlyHint and destructiveHint true): %+v, want an approval", d.Safety)
	}
	e.mustCall(t, "go.full_destructive", `{}`)
	if asked := e.approver.tools(); len(asked) != 1 || asked[0] != "go.full_destructive" {
		t.Errorf("approvals asked: %v, want one for go.full_destructive", asked)
	}
}

// fullTools mirrors the test server's descriptors of the same name.
var fullTools = map[string]string{
	"full": `{"name":"full","title":"Full","description":"Declares every field.",` +
		`"icons":[{"src":"data:image/png;base64,AA==","mimeType":"image/png","sizes":["16x16"],"theme":"light"}],` +
		`"inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}},` +
		`"outputSchema":{"type":"object","properties":{"n":{"type":"integer"},"label":{"type":"string"}},"required":["n"]},` +
		`"annotations":{"title":"Full tool","readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false,"x-future":1.0},` +
		`"execution":{"taskSupport":"forbidden"},"_meta":{"example.com/k":{"v":1.0}},"x-future":[true]}`,
}

// TestPinningHoldsChangedOutputSchema: a tool whose output schema alone
// changes (the server restarted) is a changed definition, held until an
// operator accepts it.
func TestPinningHoldsChangedOutputSchema(t *testing.T) {
	t.Setenv("MCPTEST_FULL", "1")
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	u := e.connect(t, srv, nil)
	e.mustCall(t, "go.full", `{"n":1}`)
	_, first, _ := e.g.Tool("go.full")
	t.Setenv("MCPTEST_FULL", "changed")
	killUpstream(t, u)
	eventually(t, 10*time.Second, "the changed full registered", func() bool {
		tl, _, ok := e.g.Tool("go.full")
		return ok && strings.Contains(string(tl.Descriptor), `"required":["n","label"]`)
	})
	_, second, _ := e.g.Tool("go.full")
	if second == first {
		t.Fatal("a changed output schema left the definition hash as it was")
	}
	if _, ge := e.call(t, "go.full", `{"n":2}`); ge == nil || ge.Class != tool.ClassForbidden {
		t.Fatalf("call after the change: %v, want forbidden (held)", ge)
	}
	if err := e.st.AcceptPin(context.Background(), "go.full", second, "operator", time.Now()); err != nil {
		t.Fatal(err)
	}
	e.mustCall(t, "go.full", `{"n":3}`)
}

// TestOutputSchemaChecked: a result whose structuredContent conforms to
// the tool's output schema passes unchanged; one that breaks it is never
// handed on: invalid_result with every violation and its pointer, the
// journal's intent succeeded (invalid_result) with the result kept.
func TestOutputSchemaChecked(t *testing.T) {
	t.Setenv("MCPTEST_FULL", "1")
	for _, validator := range []string{ValidatorSubset, ValidatorDraft2020} {
		t.Run(validator, func(t *testing.T) {
			e := newEnv(t)
			srv, _ := testServerSpec(t, "go")
			srv.Validator = validator
			e.connect(t, srv, nil)
			res := e.mustCall(t, "go.full_bad", `{"n":3}`)
			if res.IsError || !strings.Contains(string(res.Result), `"structuredContent":{"n":3,"label":"ok"}`) {
				t.Errorf("a conforming result: %s (is_error %v), want it unchanged", res.Result, res.IsError)
			}
			_, ge := e.call(t, "go.full_bad", `{"bad":true}`)
			if ge == nil || ge.Class != tool.ClassInvalidResult || ge.Step != "invoke" {
				t.Fatalf("a violating result: %v, want invalid_result at invoke", ge)
			}
			pointers := map[string]bool{}
			for _, v := range ge.Errors {
				pointers[v.Pointer] = true
			}
			if !pointers["/n"] || !pointers["/inner/label"] {
				t.Errorf("violations %+v, want /n and /inner/label", ge.Errors)
			}
			if ge.Pointer == "" || !strings.HasPrefix(ge.Path, "$structuredContent") {
				t.Errorf("first violation: path %q pointer %q, want one into $structuredContent", ge.Path, ge.Pointer)
			}
			var found bool
			for _, in := range e.intents(t) {
				if in.CallID != ge.CallID {
					continue
				}
				found = true
				if in.Status != "succeeded" || in.ErrorClass != "invalid_result" || !strings.Contains(string(in.Result), `"n":"one"`) {
					t.Errorf("journal: %s (%s), result %s; want succeeded (invalid_result) with the raw result", in.Status, in.ErrorClass, in.Result)
				}
			}
			if !found {
				t.Errorf("no intent %s in the journal", ge.CallID)
			}
		})
	}
}

// TestOutputSchemaTheValidatorCannotCheck: under the subset, a tool whose
// output schema is outside it is refused before it runs
// (unsupported_capability, naming the setting that accepts it); under
// draft2020-12 it runs.
func TestOutputSchemaTheValidatorCannotCheck(t *testing.T) {
	t.Setenv("MCPTEST_FULL", "1")
	e := newEnv(t)
	srv, logFile := testServerSpec(t, "go")
	e.connect(t, srv, nil)
	_, ge := e.call(t, "go.full_unchecked", `{}`)
	if ge == nil || ge.Class != tool.ClassUnsupported || !strings.Contains(ge.Message, "validator: draft2020-12") {
		t.Fatalf("call under the subset: %v, want unsupported_capability naming validator: draft2020-12", ge)
	}
	if n := countPrefix(serverLog(t, logFile), "call full_unchecked"); n != 0 {
		t.Errorf("the refused tool ran %d times", n)
	}
	if v := e.g.Refusal("go.full_unchecked"); v == nil {
		t.Error("the gateway does not report the tool as refused")
	}

	e2 := newEnv(t)
	srv2, _ := testServerSpec(t, "go2")
	srv2.Validator = ValidatorDraft2020
	e2.connect(t, srv2, nil)
	e2.mustCall(t, "go2.full_unchecked", `{"n":1}`)
}
