package mcp

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
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
	if full.Safety != (gateway.Safety{ReadOnly: true, Idempotent: true}) {
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
	if _, ge := e.call(t, "go.full", `{"n":2}`); ge == nil || ge.Class != gateway.ClassForbidden {
		t.Fatalf("call after the change: %v, want forbidden (held)", ge)
	}
	if err := e.st.AcceptPin(context.Background(), "go.full", second, "operator", time.Now()); err != nil {
		t.Fatal(err)
	}
	e.mustCall(t, "go.full", `{"n":3}`)
}
