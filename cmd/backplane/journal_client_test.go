package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// TestJournalShowClient: journal show prints the client and protocol
// version an intent recorded (issue 24), escaped for the terminal since a
// client names itself, and its JSON carries them; an intent without them
// prints no such lines.
func TestJournalShowClient(t *testing.T) {
	in := &store.Intent{CallID: "c1", Caller: "alice", Tool: "note", Status: store.StatusSucceeded,
		Arguments: []byte(`{}`), CreatedAt: time.Unix(1, 0),
		ClientInfo: "evil\x1b[31m/1.0", ProtocolVersion: "2026-07-28"}
	d := detailOf(in)
	var out bytes.Buffer
	writeIntentDetail(&out, &d)
	text := out.String()
	if strings.Contains(text, "\x1b") {
		t.Errorf("journal show printed an escape sequence from the client's name:\n%q", text)
	}
	if !strings.Contains(text, "client:") || !strings.Contains(text, "evil") || !strings.Contains(text, "protocol:        2026-07-28") {
		t.Errorf("journal show does not show the client and protocol:\n%s", text)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["client"] != in.ClientInfo || m["protocol_version"] != "2026-07-28" {
		t.Errorf("journal show --json: %s", b)
	}

	d = detailOf(&store.Intent{CallID: "c2", Arguments: []byte(`{}`), Status: store.StatusStarted})
	out.Reset()
	writeIntentDetail(&out, &d)
	if strings.Contains(out.String(), "client:") || strings.Contains(out.String(), "protocol:") {
		t.Errorf("an intent without a client shows one:\n%s", out.String())
	}
}

// TestServeJournalRecordsClient: a call through `backplane serve` from the
// Go SDK's client is journaled with the client's name/version and the
// protocol version it negotiated, and journal show prints them.
func TestServeJournalRecordsClient(t *testing.T) {
	g := newOperatorsDir(t, "0s")
	p := startServe(t, g)
	cs := connectAlice(t, p, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := os.WriteFile(filepath.Join(g.dir, "notes.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, sc := callTool(t, ctx, cs, "read", map[string]any{"path": "notes.txt"}); res.IsError {
		t.Fatalf("read: %+v", sc)
	}
	list, _ := g.runJSON(t, exitOK, "", "journal", "list")["intents"].([]any)
	callID := ""
	for _, v := range list {
		if m := v.(map[string]any); m["tool"] == "read" {
			callID, _ = m["call_id"].(string)
		}
	}
	if callID == "" {
		t.Fatalf("no journal entry of the read call in %v", list)
	}
	show := g.runJSON(t, exitOK, "", "journal", "show", callID)
	if show["client"] != "go-test/v0" || show["protocol_version"] != "2025-11-25" {
		t.Errorf("journal show %s: client %v, protocol %v; want go-test/v0, 2025-11-25", callID, show["client"], show["protocol_version"])
	}
	if r := g.run(t, "", "journal", "show", callID); !strings.Contains(r.stdout, "go-test/v0") {
		t.Errorf("journal show prints no client:\n%s", r.stdout)
	}
}
