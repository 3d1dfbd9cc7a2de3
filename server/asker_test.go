package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/backend/builtin"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// askGateway is a gateway over a real SQLite store with the built-in
// ask_user_question (a Set without an Asker of its own, as under serve),
// which alice may call. It returns the server with alice as stdio caller.
func askGateway(t *testing.T) (*server.Server, store.Store) {
	t.Helper()
	st, err := sqlite.Open(t.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"ask_user_question"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: st, Policy: rules})
	set, err := builtin.New(&builtin.Options{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	tool, ok := set.Tool("ask_user_question")
	if !ok {
		t.Fatal("no built-in ask_user_question")
	}
	if err := g.Register(context.Background(), tool); err != nil {
		t.Fatal(err)
	}
	return server.New(g, &server.Options{StdioCaller: "alice"}), st
}

// dbQuestion is the question of the brief: a plain option and one whose
// value differs from its label.
var dbQuestion = map[string]any{
	"question": "Which database should the service use?",
	"options":  []any{"PostgreSQL", map[string]any{"label": "SQLite", "value": "sqlite"}},
}

// answerProp returns the "answer" property of an elicitation's requested
// schema, checking the form around it: a flat object requiring it alone.
func answerProp(t *testing.T, p *mcp.ElicitParams) map[string]any {
	t.Helper()
	s, ok := p.RequestedSchema.(map[string]any)
	if !ok {
		t.Fatalf("requested schema %T %v", p.RequestedSchema, p.RequestedSchema)
	}
	props, _ := s["properties"].(map[string]any)
	if s["type"] != "object" || len(props) != 1 || !reflect.DeepEqual(s["required"], []any{"answer"}) {
		t.Errorf("requested schema %v, want an object with one required property answer", s)
	}
	prop, _ := props["answer"].(map[string]any)
	if prop == nil || prop["type"] != "string" {
		t.Fatalf("answer property %v, want a string", props["answer"])
	}
	return prop
}

func errorClass(t *testing.T, res *mcp.CallToolResult) (string, string) {
	t.Helper()
	e, _ := structuredError(t, res)["error"].(map[string]any)
	if e == nil {
		t.Fatalf("no error object in %s", text(res))
	}
	c, _ := e["class"].(string)
	m, _ := e["message"].(string)
	return c, m
}

func TestAskUserQuestionThroughElicitation(t *testing.T) {
	s, _ := askGateway(t)
	e := &elicitor{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "sqlite"}}}
	cs := connect(t, s, &mcp.ClientOptions{ElicitationHandler: e.handle})

	res := call(t, cs, "ask_user_question", dbQuestion)
	if res.IsError {
		t.Fatalf("the call failed: %s", text(res))
	}
	sc := structured(t, res)
	if sc["answer"] != "sqlite" || sc["label"] != "SQLite" || sc["freeform"] != false {
		t.Errorf("result %v, want answer sqlite, label SQLite, not free-form", sc)
	}
	if e.count() != 1 {
		t.Fatalf("elicited %d times", e.count())
	}
	p := e.asked[0]
	if p.Message != dbQuestion["question"] {
		t.Errorf("message %q", p.Message)
	}
	if p.Mode != "form" {
		t.Errorf("mode %q", p.Mode)
	}
	// 2025-11-25 (the Go SDK client's version here): a titled single-select
	// enum, each value with its label.
	prop := answerProp(t, p)
	want := []any{
		map[string]any{"const": "PostgreSQL", "title": "PostgreSQL"},
		map[string]any{"const": "sqlite", "title": "SQLite"},
	}
	if !reflect.DeepEqual(prop["oneOf"], want) {
		t.Errorf("options %v, want %v", prop["oneOf"], want)
	}
	if _, ok := prop["enum"]; ok {
		t.Errorf("both enum and oneOf: %v", prop)
	}

	// The other option, by value equal to its label.
	e.answer = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "PostgreSQL"}}
	if sc := structured(t, call(t, cs, "ask_user_question", dbQuestion)); sc["answer"] != "PostgreSQL" || sc["label"] != "PostgreSQL" {
		t.Errorf("result %v", sc)
	}

	// An answer outside the enum never reaches the tool as an answer: the
	// SDK checks the content against the requested schema (the call is
	// then of unknown outcome, as for any failed channel).
	e.answer = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "MySQL"}}
	res = call(t, cs, "ask_user_question", dbQuestion)
	if sc := structuredError(t, res); sc["class"] != string(tool.ClassUnknownOutcome) || sc["answer"] != nil {
		t.Errorf("an answer outside the options: %s", text(res))
	}
}

func TestAskUserQuestionFreeform(t *testing.T) {
	s, _ := askGateway(t)
	e := &elicitor{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "MySQL 8"}}}
	cs := connect(t, s, &mcp.ClientOptions{ElicitationHandler: e.handle})
	q := map[string]any{
		"question":       "Which database should the service use?",
		"options":        []any{"PostgreSQL", map[string]any{"label": "SQLite", "value": "sqlite", "description": "one file, no server"}},
		"allow_freeform": true,
		"placeholder":    "e.g. MySQL",
	}
	res := call(t, cs, "ask_user_question", q)
	sc := structured(t, res)
	if res.IsError || sc["answer"] != "MySQL 8" || sc["freeform"] != true || sc["label"] != nil {
		t.Fatalf("result %v: %s", sc, text(res))
	}
	p := e.asked[0]
	prop := answerProp(t, p)
	if prop["description"] != "e.g. MySQL" {
		t.Errorf("placeholder: property %v", prop)
	}
	if prop["enum"] != nil || prop["oneOf"] != nil {
		t.Errorf("a free-form answer is restricted: %v", prop)
	}
	// The options are in the message, since the field does not show them.
	for _, want := range []string{q["question"].(string), "PostgreSQL", "SQLite: one file, no server"} {
		if !strings.Contains(p.Message, want) {
			t.Errorf("message does not show %q:\n%s", want, p.Message)
		}
	}

	// Typing an option's label picks that option.
	e.answer = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "SQLite"}}
	if sc := structured(t, call(t, cs, "ask_user_question", q)); sc["answer"] != "sqlite" || sc["label"] != "SQLite" || sc["freeform"] != false {
		t.Errorf("the label typed: %v", sc)
	}

	// No options at all: free-form, the question alone as the message.
	e.answer = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "tomorrow"}}
	sc = structured(t, call(t, cs, "ask_user_question", map[string]any{"question": "When?"}))
	if sc["answer"] != "tomorrow" || sc["freeform"] != true {
		t.Errorf("no options: %v", sc)
	}
	if m := e.asked[2].Message; m != "When?" {
		t.Errorf("message %q", m)
	}
}

func TestAskUserQuestionDeclined(t *testing.T) {
	for _, action := range []string{"decline", "cancel"} {
		t.Run(action, func(t *testing.T) {
			s, st := askGateway(t)
			e := &elicitor{answer: &mcp.ElicitResult{Action: action}}
			cs := connect(t, s, &mcp.ClientOptions{ElicitationHandler: e.handle})
			res := call(t, cs, "ask_user_question", dbQuestion)
			if !res.IsError {
				t.Fatalf("a %s is not an error: %s", action, text(res))
			}
			if c, m := errorClass(t, res); c != string(tool.ClassCancelled) || !strings.Contains(m, "declined") {
				t.Errorf("class %q, message %q; want cancelled", c, m)
			}
			if e.count() != 1 {
				t.Errorf("elicited %d times", e.count())
			}
			// The call ran to a known end: settled, not uncertain.
			intents, err := st.ListIntents(context.Background(), store.IntentFilter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(intents) != 1 || intents[0].Status != store.StatusSucceeded {
				t.Errorf("journal %+v", intents)
			}
		})
	}
}

func TestAskUserQuestionWithoutElicitation(t *testing.T) {
	s, _ := askGateway(t)
	cs := connect(t, s, nil) // no ElicitationHandler: no capability declared
	res := call(t, cs, "ask_user_question", dbQuestion)
	if !res.IsError {
		t.Fatalf("answered without a channel: %s", text(res))
	}
	if c, m := errorClass(t, res); c != string(tool.ClassUnsupported) || !strings.Contains(m, "no interaction channel") {
		t.Errorf("class %q, message %q", c, m)
	}
}

// The question goes to the session the call came in on, not to another
// client connected at the same time.
func TestAskUserQuestionGoesToItsOwnSession(t *testing.T) {
	s, _ := askGateway(t)
	e1 := &elicitor{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "PostgreSQL"}}}
	e2 := &elicitor{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "sqlite"}}}
	cs1 := connect(t, s, &mcp.ClientOptions{ElicitationHandler: e1.handle})
	cs2 := connect(t, s, &mcp.ClientOptions{ElicitationHandler: e2.handle})
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs, want := cs1, "PostgreSQL"
			if i%2 == 1 {
				cs, want = cs2, "sqlite"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_user_question", Arguments: dbQuestion})
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			if res.IsError || !strings.Contains(string(b), `"answer":"`+want+`"`) {
				t.Errorf("call %d: %s, want answer %s", i, b, want)
			}
		}()
	}
	wg.Wait()
	if e1.count() != 3 || e2.count() != 3 {
		t.Errorf("session 1 asked %d times, session 2 %d times; want 3 and 3", e1.count(), e2.count())
	}
}

// timeout_ms bounds the elicitation: a person who never answers gives a
// timeout, and the client is told to stop asking.
func TestAskUserQuestionTimeout(t *testing.T) {
	s, _ := askGateway(t)
	cancelled := make(chan struct{})
	cs := connect(t, s, &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		select {
		case <-ctx.Done():
			close(cancelled)
			return nil, ctx.Err()
		case <-time.After(20 * time.Second):
			return &mcp.ElicitResult{Action: "decline"}, nil
		}
	}})
	start := time.Now()
	res := call(t, cs, "ask_user_question", map[string]any{"question": "Still there?", "timeout_ms": 1000})
	if d := time.Since(start); d < time.Second || d > 10*time.Second {
		t.Errorf("timeout_ms 1000 returned after %v", d)
	}
	if c, _ := errorClass(t, res); c != string(tool.ClassTimeout) {
		t.Errorf("class %q: %s", c, text(res))
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the client's elicitation was not cancelled")
	}
}

// A client at protocol 2025-06-18, which predates titled oneOf enums, is
// sent enum with enumNames. Driven as raw JSON-RPC over the stdio framing,
// as such a client would.
func TestAskUserQuestionLegacyEnum(t *testing.T) {
	s, _ := askGateway(t)
	cr, sw := io.Pipe() // server -> client
	sr, cw := io.Pipe() // client -> server
	ctx := context.Background()
	ss, err := s.Connect(ctx, &mcp.IOTransport{Reader: sr, Writer: sw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close(); cw.Close(); cr.Close() })
	in := bufio.NewScanner(cr)
	in.Buffer(nil, 1<<20)
	send := func(v string) {
		t.Helper()
		if _, err := io.WriteString(cw, v+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	type msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	read := func() msg {
		t.Helper()
		lines := make(chan string, 1)
		go func() {
			if in.Scan() {
				lines <- in.Text()
			}
			close(lines)
		}()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the server closed the stream: %v", in.Err())
			}
			var m msg
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			return m
		case <-time.After(20 * time.Second):
			t.Fatal("no message from the server within 20s")
		}
		panic("unreachable")
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"0"}}}`)
	if m := read(); !strings.Contains(string(m.Result), `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("initialize: %s %s", m.Result, m.Error)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	args, _ := json.Marshal(dbQuestion)
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask_user_question","arguments":%s}}`, args))

	m := read()
	if m.Method != "elicitation/create" {
		t.Fatalf("want elicitation/create, got %+v", m)
	}
	var p struct {
		Message         string `json:"message"`
		RequestedSchema struct {
			Properties map[string]struct {
				Type      string   `json:"type"`
				Enum      []string `json:"enum"`
				EnumNames []string `json:"enumNames"`
				OneOf     any      `json:"oneOf"`
			} `json:"properties"`
		} `json:"requestedSchema"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatal(err)
	}
	a := p.RequestedSchema.Properties["answer"]
	if a.Type != "string" || !reflect.DeepEqual(a.Enum, []string{"PostgreSQL", "sqlite"}) ||
		!reflect.DeepEqual(a.EnumNames, []string{"PostgreSQL", "SQLite"}) || a.OneOf != nil {
		t.Errorf("answer property %+v, want enum [PostgreSQL sqlite] named [PostgreSQL SQLite]", a)
	}
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"answer":"sqlite"}}}`, m.ID))

	m = read()
	var r struct {
		IsError           bool           `json:"isError"`
		StructuredContent map[string]any `json:"structuredContent"`
	}
	if err := json.Unmarshal(m.Result, &r); err != nil {
		t.Fatalf("tools/call: %v: %s %s", err, m.Result, m.Error)
	}
	if r.IsError || r.StructuredContent["answer"] != "sqlite" || r.StructuredContent["label"] != "SQLite" {
		t.Errorf("result %s", m.Result)
	}
}
