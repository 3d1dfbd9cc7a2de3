package policy

import (
	"encoding/json"
	"testing"
)

// TestKeptURLDomainLookAlikes (issue 22's review, "Kept"): an allow of
// url_fetch(domain:example.com) matches the host and its subdomains only,
// never a host that merely contains or starts with the name (a longer
// suffix, a prefix glued on, userinfo, a path, query or fragment naming
// it, an encoded dot), nor a URL that is not absolute http(s).
func TestKeptURLDomainLookAlikes(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "alice", Allow: []string{"url_fetch(domain:example.com)"}}}, &Options{Workspace: []string{"/ws"}})
	if err != nil {
		t.Fatal(err)
	}
	decide := func(u string) Effect {
		b, _ := json.Marshal(map[string]string{"url": u})
		return decideJSON(t, r, "url_fetch", string(b)).Effect
	}
	for _, u := range []string{
		"https://example.com.evil/",
		"https://example.com.evil.net/x",
		"https://evilexample.com/",
		"https://example.co/",
		"https://example.com@evil.net/",
		"https://example.com:443@evil.net/",
		"https://user:example.com@evil.net/",
		`https://example.com\@evil.net/`,
		"https://evil.net/example.com",
		"https://evil.net/?u=https://example.com/",
		"https://evil.net#@example.com",
		"https://example.com%2eevil/",
		"https://evil.net%23.example.com/",
		"ftp://example.com/",
		"//example.com/",
		"example.com",
		"file://example.com/etc/passwd",
	} {
		if got := decide(u); got != EffectDeny {
			t.Errorf("url_fetch %q: %v, want deny (not example.com)", u, got)
		}
	}
	// The host itself and its subdomains (the test can fail).
	for _, u := range []string{"https://example.com/x", "https://EXAMPLE.com./x", "https://api.example.com/x",
		"http://example.com:8443/x", "https://user@example.com/", "https://evil.net@example.com/"} {
		if got := decide(u); got != EffectAllow {
			t.Errorf("url_fetch %q: %v, want allow", u, got)
		}
	}
}
