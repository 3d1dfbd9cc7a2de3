package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The serve section of the MCP issue's example, verbatim.
const issueServeExample = `serve:
  http: 127.0.0.1:8787           # streamable HTTP at /mcp, /metrics, /healthz
  tokens: {"local-dev-token": alice}   # bearer token -> caller
  stdio_caller: alice            # the caller for ` + "`backplane serve --stdio`" + `
`

func TestServeIssueExample(t *testing.T) {
	c, err := Parse([]byte(issueServeExample), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := ServeConfig{
		HTTP:         "127.0.0.1:8787",
		Tokens:       map[string]string{"local-dev-token": "alice"},
		StdioCaller:  "alice",
		ApprovalWait: DefaultServeApprovalWait,
		Line:         2,

		RatePerSecond: DefaultServeRatePerSecond,
		RateBurst:     DefaultServeRateBurst,
	}
	got := c.Serve
	got.approvalWaitSet = false
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Serve = %+v, want %+v", got, want)
	}
}

func TestServeDefaults(t *testing.T) {
	for _, src := range []string{"", "store: .backplane\n", "serve: {}\n", "serve:\n"} {
		c, err := Parse([]byte(src), "backplane.yaml")
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		s := c.Serve
		if s.HTTP != DefaultServeHTTP || s.ApprovalWait != DefaultServeApprovalWait || s.AllowRemote || len(s.Tokens) != 0 || s.StdioCaller != "" {
			t.Errorf("%q: defaults %+v", src, s)
		}
	}
}

func TestServeValues(t *testing.T) {
	c, err := Parse([]byte(`serve:
  http: "[::1]:0"
  approval_wait: 0s
  tokens:
    tok-A.b_c~d+e/f==: alice
    second: bob
`), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Serve.HTTP != "[::1]:0" || c.Serve.ApprovalWait != 0 {
		t.Errorf("http %q, approval_wait %s (0s must stay 0, not the default)", c.Serve.HTTP, c.Serve.ApprovalWait)
	}
	if !reflect.DeepEqual(c.Serve.Tokens, map[string]string{"tok-A.b_c~d+e/f==": "alice", "second": "bob"}) {
		t.Errorf("tokens %v", c.Serve.Tokens)
	}

	c, err = Parse([]byte("serve:\n  http: 0.0.0.0:8787\n  allow_remote: true\n"), "backplane.yaml")
	if err != nil {
		t.Fatalf("allow_remote after http: %v", err)
	}
	if !c.Serve.AllowRemote || c.Serve.HTTP != "0.0.0.0:8787" {
		t.Errorf("%+v", c.Serve)
	}
	if _, err := Parse([]byte("serve:\n  http: localhost:9000\n"), "backplane.yaml"); err != nil {
		t.Errorf("localhost: %v", err)
	}
}

func TestServeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		want      string
	}{
		{"remote address", "serve:\n  http: 0.0.0.0:8787\n", 2, "not a loopback address"},
		{"every interface", "serve:\n  http: \":8787\"\n", 2, "not a loopback address"},
		{"a host name", "serve:\n  tokens: {t: a}\n  http: example.com:80\n", 3, "not a loopback address"},
		{"allow_remote false", "serve:\n  allow_remote: false\n  http: 10.0.0.1:80\n", 3, "allow_remote"},
		{"no port", "serve:\n  http: 127.0.0.1\n", 2, "not host:port"},
		{"bad port", "serve:\n  http: 127.0.0.1:http\n", 2, "port must be a number"},
		{"port too large", "serve:\n  http: 127.0.0.1:70000\n", 2, "port must be a number"},
		{"empty http", "serve:\n  http: \"\"\n", 2, "host:port"},
		{"unknown key", "serve:\n  https: 127.0.0.1:1\n", 2, `unknown key "https"`},
		{"token with a space", "serve:\n  tokens: {\"a b\": alice}\n", 2, "bearer token"},
		{"empty token", "serve:\n  tokens: {\"\": alice}\n", 2, "bearer token"},
		{"token without caller", "serve:\n  tokens:\n    tok: \"\"\n", 3, "needs a caller"},
		{"token caller not a string", "serve:\n  tokens:\n    tok: [a]\n", 3, "must be a string"},
		{"duplicate token", "serve:\n  tokens:\n    tok: a\n    tok: b\n", 4, "duplicate key"},
		{"tokens a list", "serve:\n  tokens: [a]\n", 2, "must be a mapping"},
		{"negative wait", "serve:\n  approval_wait: -1s\n", 2, "must not be negative"},
		{"bad wait", "serve:\n  approval_wait: soon\n", 2, "bad duration"},
		{"allow_remote not bool", "serve:\n  allow_remote: yes please\n", 2, "true or false"},
		{"serve a list", "serve: [http]\n", 1, "must be a mapping"},
		{"idle timeout too short", "serve:\n  session_idle_timeout: 10ms\n", 2, "at least 1s"},
		{"no sessions", "serve:\n  max_sessions_per_caller: 0\n", 2, "from 1 to"},
		{"origin with a path", "serve:\n  allowed_origins: [\"https://a.example/x\"]\n", 2, "not an origin"},
		{"origin without scheme", "serve:\n  allowed_origins: [a.example]\n", 2, "not an origin"},
		{"public_url with a path", "serve:\n  public_url: https://a.example/backplane\n", 2, "origin only"},
		{"public_url with a query", "serve:\n  public_url: https://a.example/?x=1\n", 2, "origin only"},
		{"public_url without scheme", "serve:\n  public_url: a.example\n", 2, "scheme must be https"},
		{"public_url ftp", "serve:\n  public_url: ftp://a.example\n", 2, "scheme must be https"},
		{"public_url without host", "serve:\n  public_url: \"https://\"\n", 2, "names no host"},
		{"public_url with a user", "serve:\n  public_url: https://u:p@a.example\n", 2, "user name"},
		{"public_url not a string", "serve:\n  public_url: [x]\n", 2, "must be a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "backplane.yaml")
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *config.Error", err)
			}
			if ce.Line != tc.line || !strings.Contains(ce.Msg, tc.want) {
				t.Errorf("error %q at line %d, want line %d containing %q", ce.Msg, ce.Line, tc.line, tc.want)
			}
		})
	}
}

func TestCheckServeAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8787": true, "127.0.0.2:1": true, "[::1]:8787": true, "localhost:0": true,
		"0.0.0.0:8787": false, "[::]:8787": false, ":8787": false, "192.168.1.2:80": false, "localhost.evil.com:80": false,
	} {
		if err := CheckServeAddr(addr, false); (err == nil) != ok {
			t.Errorf("CheckServeAddr(%q) = %v", addr, err)
		}
		if err := CheckServeAddr(addr, true); err != nil {
			t.Errorf("CheckServeAddr(%q, allowRemote) = %v", addr, err)
		}
	}
}

// serve.public_url is validated at load and kept as an origin without a
// trailing slash (issue 22, finding 13).
func TestServePublicURL(t *testing.T) {
	for src, want := range map[string]string{
		"https://backplane.example/":     "https://backplane.example",
		"https://backplane.example:8443": "https://backplane.example:8443",
		"http://[::1]:9000":              "http://[::1]:9000",
	} {
		c, err := Parse([]byte("serve:\n  public_url: \""+src+"\"\n"), "backplane.yaml")
		if err != nil || c.Serve.PublicURL != want {
			t.Errorf("%s: %q %v, want %q", src, c.Serve.PublicURL, err, want)
		}
	}
}

func TestServeLimits(t *testing.T) {
	c, err := Parse([]byte("serve:\n  session_idle_timeout: 5m\n  max_sessions_per_caller: 4\n  allowed_origins: [\"https://app.example\", \"http://[::1]:3000\"]\n"), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Serve.SessionIdleTimeout != 5*time.Minute || c.Serve.MaxSessionsPerCaller != 4 || len(c.Serve.AllowedOrigins) != 2 {
		t.Errorf("serve %+v", c.Serve)
	}
}

// TestServeResume: serve.resume sets the event buffer and the grace; 0
// turns each off; left out, the server's defaults (0 here) apply.
func TestServeResume(t *testing.T) {
	for _, c := range []struct {
		src   string
		bytes int
		grace time.Duration
	}{
		{"serve: {}\n", 0, 0},
		{"serve:\n  resume: {max_bytes: 1048576, grace: 30s}\n", 1 << 20, 30 * time.Second},
		{"serve:\n  resume: {max_bytes: 0}\n", -1, 0},
		{"serve:\n  resume: {grace: 0s}\n", 0, -1},
	} {
		cfg, err := Parse([]byte(c.src), "backplane.yaml")
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		if cfg.Serve.ResumeBytes != c.bytes || cfg.Serve.ResumeGrace != c.grace {
			t.Errorf("%q: ResumeBytes %d, ResumeGrace %v; want %d, %v", c.src, cfg.Serve.ResumeBytes, cfg.Serve.ResumeGrace, c.bytes, c.grace)
		}
	}
	for src, msg := range map[string]string{
		"serve:\n  resume: {max_bytes: -1}\n":         "max_bytes must be from 0",
		"serve:\n  resume: {max_bytes: 2147483648}\n": "max_bytes must be from 0",
		"serve:\n  resume: {grace: 1h}\n":             "grace must be from 0s",
		"serve:\n  resume: {buffer: 1}\n":             `unknown key "buffer"`,
		"serve:\n  resume: 10s\n":                     "must be a mapping",
	} {
		_, err := Parse([]byte(src), "backplane.yaml")
		var ce *Error
		if !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want line 2 saying %q", src, err, msg)
		}
	}
}

// TestServeApprovalWaitIsApprovalsWait: approvals.wait is the wait of
// served calls too; serve.approval_wait, when the file sets it, overrides
// it (finding 21 of issue 22: before, served calls ignored approvals.wait).
func TestServeApprovalWaitIsApprovalsWait(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want time.Duration
	}{
		{"approvals: {wait: 30s}\n", 30 * time.Second},
		{"approvals: {wait: 30s}\nserve: {approval_wait: 5s}\n", 5 * time.Second},
		{"approvals: {wait: 30s}\nserve: {approval_wait: 0s}\n", 0},
		{"serve: {approval_wait: 5s}\n", 5 * time.Second},
		{"", 0},
	} {
		c, err := Parse([]byte(tc.src), "backplane.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		if c.Serve.ApprovalWait != tc.want {
			t.Errorf("%q: served calls wait %s, want %s", tc.src, c.Serve.ApprovalWait, tc.want)
		}
	}
}

// TestSelfApproveTimeout: approvals.self_approve_timeout is read, and
// bounded.
func TestSelfApproveTimeout(t *testing.T) {
	c, err := Parse([]byte("approvals: {self_approve_timeout: 2m}\n"), "backplane.yaml")
	if err != nil || c.Approvals.SelfApproveTimeout != 2*time.Minute {
		t.Fatalf("2m: %v %+v", err, c.Approvals)
	}
	for _, bad := range []string{"0s", "-1s", "11m"} {
		_, err := Parse([]byte("approvals: {self_approve_timeout: "+bad+"}\n"), "backplane.yaml")
		if err == nil || !strings.Contains(err.Error(), "self_approve_timeout") {
			t.Errorf("%s: %v, want an error naming self_approve_timeout", bad, err)
		}
	}
}

// TestApprovalsTaskLease: approvals.task_lease is read, and bounded
// (from 1s: a runner renews a third of it at a time).
func TestApprovalsTaskLease(t *testing.T) {
	c, err := Parse([]byte("approvals: {task_lease: 2s}\n"), "backplane.yaml")
	if err != nil || c.Approvals.TaskLease != 2*time.Second {
		t.Fatalf("2s: %v %+v", err, c.Approvals)
	}
	for _, bad := range []string{"0s", "500ms", "2h", "soon"} {
		_, err := Parse([]byte("approvals: {task_lease: "+bad+"}\n"), "backplane.yaml")
		if err == nil || !strings.Contains(err.Error(), "task_lease") {
			t.Errorf("%s: %v, want an error naming task_lease", bad, err)
		}
	}
}

// TestServeRateAndSubscriptionLimits: serve.rate_limit and the
// subscription caps (issue 22, item 7); left out, the rate's defaults
// and the server's caps (0 here); per_second 0 turns the rate limit off.
func TestServeRateAndSubscriptionLimits(t *testing.T) {
	for _, c := range []struct {
		src                    string
		rate, burst, sess, per int
	}{
		{"serve: {}\n", 100, 200, 0, 0},
		{"", 100, 200, 0, 0},
		{"serve:\n  rate_limit: {per_second: 5, burst: 9}\n  max_subscriptions_per_session: 3\n  max_subscriptions_per_caller: 7\n", 5, 9, 3, 7},
		{"serve:\n  rate_limit: {per_second: 0}\n", -1, 200, 0, 0},
		{"serve:\n  rate_limit: {burst: 1}\n", 100, 1, 0, 0},
		{"serve:\n  rate_limit: {per_second: 1000}\n", 1000, 1000, 0, 0},
	} {
		cfg, err := Parse([]byte(c.src), "backplane.yaml")
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		s := cfg.Serve
		if s.RatePerSecond != c.rate || s.RateBurst != c.burst || s.MaxSubscriptionsPerSession != c.sess || s.MaxSubscriptionsPerCaller != c.per {
			t.Errorf("%q: %+v", c.src, s)
		}
	}
	for src, msg := range map[string]string{
		"serve:\n  rate_limit: {per_second: -1}\n":          "per_second must be from 0",
		"serve:\n  rate_limit: {burst: 0}\n":                "burst must be from 1",
		"serve:\n  rate_limit: {per_second: 1.5}\n":         "integer",
		"serve:\n  rate_limit: {rate: 1}\n":                 `unknown key "rate"`,
		"serve:\n  rate_limit: 100\n":                       "must be a mapping",
		"serve:\n  max_subscriptions_per_session: 0\n":      "max_subscriptions_per_session must be from 1",
		"serve:\n  max_subscriptions_per_caller: 2000000\n": "max_subscriptions_per_caller must be from 1",
	} {
		_, err := Parse([]byte(src), "backplane.yaml")
		var ce *Error
		if !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want line 2 saying %q", src, err, msg)
		}
	}
}
