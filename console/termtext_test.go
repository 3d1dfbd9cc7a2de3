package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/internal/termtext"
)

// unsafeIn lists what termtext.Unsafe refuses in s, '\n' aside.
func unsafeIn(s string) []rune {
	var found []rune
	for _, r := range s {
		if r != '\n' && termtext.Unsafe(r) {
			found = append(found, r)
		}
	}
	return found
}

// TestPagesShowControlsVisibly is finding 3 of issue 22 on the console: a
// pending command that redraws itself as "git status" on a terminal, and
// a description reversed by U+202E, are shown with their escapes on the
// page, in the live card and in the JSON API; html/template alone leaves
// them raw.
func TestPagesShowControlsVisibly(t *testing.T) {
	fb, c, srv := newTestConsole(t)
	cmd := "rm -r -f ../ws/src # \x1b[2K\r git status \x1b[4A \u202e x"
	fb.mu.Lock()
	fb.approvals = append(fb.approvals, Approval{ID: "apr_c", Caller: "alice\u2066", Tool: "bash", Status: "pending",
		ToolDescription: "Runs\u202e a command", Command: cmd,
		Arguments: json.RawMessage(`{"command":` + string(mustMarshal(t, cmd)) + `}`),
		CreatedAt: time.Unix(1000, 0), ExpiresAt: time.Unix(2000, 0)})
	fb.mu.Unlock()
	cl := noRedirect()
	for _, p := range []string{"/ui/approvals/apr_c", "/ui/approvals", "/ui/api/approvals"} {
		resp, body := do(t, cl, "GET", srv.URL+p, opToken, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, resp.StatusCode, body)
		}
		if bad := unsafeIn(body); len(bad) > 0 {
			t.Errorf("GET %s: %q raw on the page:\n%s", p, bad, body)
		}
		want := `\x1b[2K\x0d git status \x1b[4A \u202e x`
		if strings.HasPrefix(p, "/ui/api/") {
			want = `\u001b[2K\r git status \u001b[4A \u202e x` // JSON's own escapes
		}
		if !strings.Contains(body, want) {
			t.Errorf("GET %s: the command is not shown as %s:\n%s", p, want, body)
		}
	}
	_, body := do(t, cl, "GET", srv.URL+"/ui/approvals/apr_c", opToken, nil, nil)
	if !strings.Contains(body, `Runs\u202e a command`) {
		t.Errorf("the tool description is not shown escaped:\n%s", body)
	}
	// The card the live stream sends.
	card, err := c.renderFragment("approval_card", fb.approvals[len(fb.approvals)-1])
	if err != nil {
		t.Fatal(err)
	}
	if bad := unsafeIn(card); len(bad) > 0 || !strings.Contains(card, `\x1b[2K`) {
		t.Errorf("the live card shows %q raw:\n%s", bad, card)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
