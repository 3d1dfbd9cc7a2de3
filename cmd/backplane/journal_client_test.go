package main

import (
	"bytes"
	"encoding/json"
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
