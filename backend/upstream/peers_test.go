package upstream

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/tool"
)

// The tests of this file run the official reference servers, installed from
// npm with a committed lockfile under testdata/mcp-peers, over stdio. They
// skip, saying why, when node or the packages are absent.

// peerSpec is one reference server: how to start it, and how to start an
// independent copy on the same data.
type peerSpec struct {
	name string
	argv []string
	env  []string // NAME=value for the independent copy
}

func referencePeers(t *testing.T) []peerSpec {
	t.Helper()
	root := t.TempDir()
	memFile := filepath.Join(t.TempDir(), "memory.jsonl")
	t.Setenv("MEMORY_FILE_PATH", memFile)
	return []peerSpec{
		{name: "everything", argv: []string{peer(t, "everything")}},
		{name: "filesystem", argv: []string{peer(t, "filesystem"), root}},
		{name: "memory", argv: []string{peer(t, "memory")}, env: []string{"MEMORY_FILE_PATH=" + memFile}},
	}
}

func (p peerSpec) server(validator string) Server {
	return Server{Name: p.name, Command: p.argv, Env: []string{"MEMORY_FILE_PATH"}, Validator: validator}
}

// TestReferenceCatalogsUnchanged: every tool of the three reference servers
// is registered with the description and the input schema bytes the server
// sends, as read on the wire by an independent JSON-RPC client.
func TestReferenceCatalogsUnchanged(t *testing.T) {
	for _, p := range referencePeers(t) {
		t.Run(p.name, func(t *testing.T) {
			e := newEnv(t)
			u := e.connect(t, p.server(ValidatorSubset), nil)
			wire, _ := startRawPeer(t, p.argv, p.env...).listAll(t)
			if len(wire) == 0 {
				t.Fatal("the server lists no tools")
			}
			for _, w := range wire {
				tl, _, ok := e.g.Tool(p.name + "." + w.Name)
				if !ok {
					t.Errorf("%s.%s is not registered", p.name, w.Name)
					continue
				}
				if string(tl.InputSchema) != string(w.InputSchema) {
					t.Errorf("%s.%s schema\n%s\nthe wire's\n%s", p.name, w.Name, tl.InputSchema, w.InputSchema)
				}
				if tl.Description != w.Description {
					t.Errorf("%s.%s description %q, the wire's %q", p.name, w.Name, tl.Description, w.Description)
				}
			}
			if got := len(u.Tools()); got != len(wire) {
				t.Errorf("%d tools registered, %d listed", got, len(wire))
			}
		})
	}
}

// TestReferenceSubsetRefusesEveryCall: under the subset, every tool of the
// three servers declares $schema, so every call is refused with
// unsupported_capability naming $schema, before anything else: no intent,
// no approval asked, and the servers show no effect (the memory graph stays
// empty, no file is written).
func TestReferenceSubsetRefusesEveryCall(t *testing.T) {
	peers := referencePeers(t)
	e := newEnv(t)
	var root string
	for _, p := range peers {
		e.connect(t, p.server(""), nil)
		if p.name == "filesystem" {
			root = p.argv[1]
		}
	}
	args := map[string]string{
		"memory.create_entities": `{"entities":[{"name":"Ada","entityType":"person","observations":["wrote the first program"]}]}`,
		"filesystem.write_file":  `{"path":` + quote(filepath.Join(root, "written.txt")) + `,"content":"x"}`,
		"everything.echo":        `{"message":"hi"}`,
	}
	n := 0
	for _, tl := range e.g.Tools() {
		a := args[tl.Name]
		if a == "" {
			a = `{}`
		}
		_, ge := e.call(t, tl.Name, a)
		n++
		if ge == nil {
			t.Errorf("%s: the call was not refused", tl.Name)
			continue
		}
		if ge.Class != tool.ClassUnsupported || ge.Keyword != "$schema" || ge.Step != "validate" ||
			len(ge.Errors) == 0 || ge.Errors[0].Keyword != "$schema" {
			t.Errorf("%s: %s (keyword %q, step %s), want unsupported_capability naming $schema at validate", tl.Name, ge, ge.Keyword, ge.Step)
		}
	}
	if n < 20 {
		t.Errorf("only %d tools called", n)
	}
	if in := e.intents(t); len(in) != 0 {
		t.Errorf("%d intents recorded for refused calls", len(in))
	}
	if asked := e.approver.tools(); len(asked) != 0 {
		t.Errorf("approvals asked for refused calls: %v", asked)
	}
	// The servers were not reached: their state shows nothing.
	if _, err := os.Stat(filepath.Join(root, "written.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("filesystem.write_file wrote its file (%v)", err)
	}
	for _, p := range peers {
		if p.name == "memory" {
			graph := startRawPeer(t, p.argv, p.env...).callTool(t, "read_graph", `{}`)
			if entities := graphEntities(t, graph); len(entities) != 0 {
				t.Errorf("the memory graph holds %v after refused calls", entities)
			}
		}
	}
}

// TestReferenceDraft2020: under draft2020-12 the same servers' valid calls
// run and invalid ones are refused before the server, with every violation
// reported.
func TestReferenceDraft2020(t *testing.T) {
	peers := referencePeers(t)
	e := newEnv(t)
	var memory peerSpec
	for _, p := range peers {
		if p.name == "filesystem" {
			continue
		}
		e.connect(t, p.server(ValidatorDraft2020), nil)
		if p.name == "memory" {
			memory = p
		}
	}
	independent := startRawPeer(t, memory.argv, memory.env...)

	res := e.mustCall(t, "everything.echo", `{"message":"hi there"}`)
	if res.IsError || !strings.Contains(string(res.Result), "hi there") {
		t.Errorf("echo: %s", res.Result)
	}
	_, ge := e.call(t, "everything.echo", `{"message":5}`)
	if ge == nil || ge.Class != tool.ClassValidation || ge.Pointer != "/message" {
		t.Errorf("echo with a number: %v, want validation at /message", ge)
	}

	// Invalid: the entity lacks entityType and observations. Both are
	// reported; the server never sees the call.
	_, ge = e.call(t, "memory.create_entities", `{"entities":[{"name":"Bad"}]}`)
	if ge == nil || ge.Class != tool.ClassValidation {
		t.Fatalf("invalid create_entities: %v, want validation", ge)
	}
	var missing []string
	for _, v := range ge.Errors {
		if v.Keyword == "required" {
			missing = append(missing, v.Details["property"].(string))
		}
	}
	slices.Sort(missing)
	if !slices.Equal(missing, []string{"entityType", "observations"}) {
		t.Errorf("missing properties reported %v, want entityType and observations (%v)", missing, ge.Errors)
	}
	if in := e.intents(t); len(in) != 1 { // the echo
		t.Errorf("%d intents, want 1 (refused calls leave none)", len(in))
	}
	if entities := graphEntities(t, independent.callTool(t, "read_graph", `{}`)); len(entities) != 0 {
		t.Fatalf("the graph holds %v after an invalid call", entities)
	}

	// Valid: it runs (after the approval its missing readOnlyHint demands)
	// and the independent client sees the entity.
	e.mustCall(t, "memory.create_entities", `{"entities":[{"name":"Ada","entityType":"person","observations":["wrote the first program"]}]}`)
	if asked := e.approver.tools(); !slices.Equal(asked, []string{"memory.create_entities"}) {
		t.Errorf("approvals asked for %v", asked)
	}
	if entities := graphEntities(t, independent.callTool(t, "read_graph", `{}`)); !slices.Equal(entities, []string{"Ada"}) {
		t.Errorf("the graph holds %v, want [Ada]", entities)
	}
	res = e.mustCall(t, "memory.read_graph", `{}`)
	if entities := graphEntities(t, res.Result); !slices.Equal(entities, []string{"Ada"}) {
		t.Errorf("read_graph through the gateway: %v", entities)
	}
}

// graphEntities reads the entity names of a read_graph result.
func graphEntities(t *testing.T, result []byte) []string {
	t.Helper()
	var r struct {
		StructuredContent *struct {
			Entities []struct{ Name string } `json:"entities"`
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(result, &r); err != nil || r.StructuredContent == nil {
		t.Fatalf("read_graph result %s: %v", result, err)
	}
	names := []string{}
	for _, e := range r.StructuredContent.Entities {
		names = append(names, e.Name)
	}
	return names
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
