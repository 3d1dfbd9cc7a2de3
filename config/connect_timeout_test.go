package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestServerConnectTimeout(t *testing.T) {
	c, err := Parse([]byte("servers:\n  - name: a\n    command: [x]\n    connect_timeout: 2m\n  - name: b\n    url: http://127.0.0.1:9/mcp\n"), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Servers[0].ConnectTimeout; got != 2*time.Minute {
		t.Errorf("connect_timeout: 2m parsed as %v", got)
	}
	if got := c.Servers[1].ConnectTimeout; got != 0 {
		t.Errorf("no connect_timeout parsed as %v, want 0 (the default)", got)
	}
	for _, tc := range []struct{ value, msg string }{
		{"0s", "must be positive"},
		{"-1s", "must not be negative"},
		{"1h", "at most 30m0s"},
		{"soon", "bad duration"},
		{"[1]", "must be a duration"},
	} {
		_, err := Parse([]byte("servers:\n  - name: a\n    command: [x]\n    connect_timeout: "+tc.value+"\n"), "backplane.yaml")
		var ce *Error
		if !errors.As(err, &ce) || ce.Line != 4 || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("connect_timeout: %s: %v, want line 4 saying %q", tc.value, err, tc.msg)
		}
	}
}

// accept_added_tools: false by default, a boolean when given.
func TestServerAcceptAddedTools(t *testing.T) {
	c, err := Parse([]byte("servers:\n  - name: a\n    command: [x]\n    accept_added_tools: true\n  - name: b\n    command: [x]\n"), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Servers[0].AcceptAddedTools || c.Servers[1].AcceptAddedTools {
		t.Errorf("accept_added_tools parsed as %v and %v, want true and false (the default)", c.Servers[0].AcceptAddedTools, c.Servers[1].AcceptAddedTools)
	}
	_, err = Parse([]byte("servers:\n  - name: a\n    command: [x]\n    accept_added_tools: sometimes\n"), "backplane.yaml")
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 4 {
		t.Errorf("accept_added_tools: sometimes: %v, want an error on line 4", err)
	}
}
