package upstream

import (
	"strings"
	"testing"
)

// TestVisibilityOfReferenceServer: under the subset, server-everything's
// tools (which put $schema at their root) are refused, the summary names
// $schema and says draft2020-12 would accept them, and the start-up log
// says so; under draft2020-12 every tool is callable.
func TestVisibilityOfReferenceServer(t *testing.T) {
	p := referencePeers(t)[0] // everything
	e := newEnv(t)
	u := e.connect(t, p.server(ValidatorSubset), nil)
	v := u.Visibility()
	if v.Tools == 0 || v.Refused() == 0 {
		t.Fatalf("visibility %+v: want refused tools", v)
	}
	if v.Keywords["$schema"] != v.Refused() {
		t.Errorf("keywords %v: every refused tool has $schema (%d refused)", v.Keywords, v.Refused())
	}
	if v.OtherValidator != ValidatorDraft2020 || v.OtherAccepts != v.Refused() {
		t.Errorf("draft2020-12 would accept %d of %d (%s)", v.OtherAccepts, v.Refused(), v.OtherValidator)
	}
	// The gateway agrees, tool by tool.
	for _, name := range u.Tools() {
		if err := e.g.Refusal(name); err == nil {
			t.Errorf("%s: no refusal from the gateway", name)
		}
	}
	if !strings.Contains(e.logs.String(), "validator: draft2020-12 on this server would accept") {
		t.Errorf("the start-up log does not name the setting:\n%s", e.logs.String())
	}

	e2 := newEnv(t)
	u2 := e2.connect(t, Server{Name: "everything", Command: p.argv, Validator: ValidatorDraft2020}, nil)
	if v := u2.Visibility(); v.Callable != v.Tools || v.Tools == 0 {
		t.Errorf("under draft2020-12: %s", v)
	}
	for _, name := range u2.Tools() {
		if err := e2.g.Refusal(name); err != nil {
			t.Errorf("%s refused under draft2020-12: %v", name, err)
		}
	}
}

// TestVisibilityDraft2020Refusal: a schema draft2020-12 cannot use (a
// remote $ref) is refused, and the gateway says so for that tool only.
func TestVisibilityDraft2020Refusal(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	srv.Validator = ValidatorDraft2020
	u := e.connect(t, srv, nil)
	if err := e.g.Refusal("go.remote_ref"); err == nil || !strings.Contains(err.Error(), ValidatorDraft2020) {
		t.Errorf("go.remote_ref: refusal %v", err)
	}
	if err := e.g.Refusal("go.greet"); err != nil {
		t.Errorf("go.greet refused: %v", err)
	}
	if v := u.Visibility(); v.Refused() < 1 || v.Callable == 0 {
		t.Errorf("visibility %s", v)
	}
}
