package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/tool"
)

// server is a local test server that counts the requests it receives.
type server struct {
	*httptest.Server
	hits atomic.Int64
}

func newServer(t *testing.T, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// hostPort is the server's 127.0.0.1:port.
func (s *server) hostPort() string { return strings.TrimPrefix(s.URL, "http://") }

func fetchResultOf(t *testing.T, res *tool.Result, err error) fetchResult {
	t.Helper()
	if err != nil {
		t.Fatalf("url_fetch: Go error %v", err)
	}
	var r fetchResult
	if err := json.Unmarshal(res.Content, &r); err != nil {
		t.Fatalf("result %s: %v", res.Content, err)
	}
	return r
}

func TestURLFetchAllowlistedLocalServer(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "hello from the test server\n")
	})
	f := newFixture(t, &Options{URLFetch: URLFetchOptions{Allow: []string{srv.hostPort()}}})
	res, err := call(t, f.set, "url_fetch", args("url", srv.URL+"/page"))
	r := fetchResultOf(t, res, err)
	if res.IsError || r.Status != 200 || r.Content != "hello from the test server\n" || r.Truncated ||
		r.FinalURL != srv.URL+"/page" || !strings.HasPrefix(r.ContentType, "text/plain") {
		t.Errorf("result %+v", r)
	}
	if srv.hits.Load() != 1 {
		t.Errorf("%d requests reached the server", srv.hits.Load())
	}
}

func TestURLFetchRefusesLoopbackWithoutAllowlist(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "should not be reached") })
	f := newFixture(t, nil)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	for _, u := range []string{
		srv.URL,
		"http://127.0.0.1:" + port + "/x",
		"http://127.1.2.3:" + port + "/",
		"http://[::1]:" + port + "/",
		"http://[::ffff:127.0.0.1]:" + port + "/",
		"http://0.0.0.0:" + port + "/",
	} {
		e := mustFail(t, f.set, "url_fetch", args("url", u), tool.ClassForbidden)
		if !strings.Contains(e.Message, "refused") {
			t.Errorf("%s: %q", u, e.Message)
		}
	}
	// Numeric forms that are not IP literals to Go go to the resolver;
	// whether it knows them or not, nothing reaches the server.
	for _, u := range []string{"http://0:" + port + "/", "http://2130706433:" + port + "/", "http://0x7f000001:" + port + "/"} {
		res, err := call(t, f.set, "url_fetch", args("url", u))
		if e := errorOf(t, "url_fetch", args("url", u), res, err); e.Class == "" {
			t.Errorf("%s: no class", u)
		}
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("%d requests reached the loopback server", n)
	}
}

// Private, link-local and the like are refused before any connection is
// attempted: the dial hook counts no dial at all (the literal address is
// refused when the URL is checked).
func TestURLFetchRefusesPrivateAddressesBeforeDialing(t *testing.T) {
	f := newFixture(t, nil)
	dials := countDials(f.set.fetch)
	for _, u := range []string{
		"http://10.0.0.1/",
		"https://10.0.0.1:8443/x",
		"http://172.16.5.4/",
		"http://192.168.1.1/",
		"http://169.254.169.254/latest/meta-data/",
		"http://100.64.0.1/",
		"http://[fd00::1]/",
		"http://[fe80::1]/",
		"http://[64:ff9b::a00:1]/", // 10.0.0.1 through NAT64
		"http://224.0.0.1/",
		"http://[ff02::1]/",
		"http://255.255.255.255/",
	} {
		e := mustFail(t, f.set, "url_fetch", args("url", u), tool.ClassForbidden)
		if d, c := dials.counts(); d != 0 || c != 0 {
			t.Errorf("%s: %d dials and %d connects: it was not refused before dialing", u, d, c)
		}
		if e.Details["reason"] == nil || e.Details["address"] == nil {
			t.Errorf("%s: details %v", u, e.Details)
		}
	}
}

// The dial-time check, on its own. Its Control function refuses a private
// address without any socket (called directly), and the dialer refuses
// loopback addresses in Control: the connect hook, which runs once an
// address passed the check, just before connect(2), counts none.
func TestURLFetchDialerRefusesBeforeConnect(t *testing.T) {
	f := newFixture(t, nil)
	dials := countDials(f.set.fetch)
	for _, addr := range []string{"10.0.0.1:80", "169.254.169.254:80", "[fd00::1]:443", "[fe80::1%lo]:80"} {
		err := f.set.fetch.control(addr)("tcp", addr, nil)
		var te *toolError
		if !errors.As(err, &te) || te.class != tool.ClassForbidden {
			t.Errorf("control %s: %v, want a forbidden refusal", addr, err)
		}
	}
	// Only loopback is dialled (tests send nothing beyond 127.0.0.0/8 and
	// ::1), and only up to Control.
	for _, addr := range []string{"127.0.0.1:1", "[::1]:80"} {
		conn, err := f.set.fetch.dial(context.Background(), "tcp", addr)
		if err == nil {
			conn.Close()
			t.Fatalf("dial %s succeeded", addr)
		}
		var te *toolError
		if !errors.As(err, &te) || te.class != tool.ClassForbidden {
			t.Errorf("dial %s: %v, want a forbidden refusal", addr, err)
		}
	}
	if d, c := dials.counts(); d != 2 || c != 0 {
		t.Errorf("%d dials and %d connects, want 2 and 0", d, c)
	}
	// The hook does count an address that passes: an allowlisted one.
	f = newFixture(t, &Options{URLFetch: URLFetchOptions{Allow: []string{"127.0.0.1:1"}}})
	dials = countDials(f.set.fetch)
	if err := f.set.fetch.control("127.0.0.1:1")("tcp", "127.0.0.1:1", nil); err != nil {
		t.Fatalf("control of an allowlisted address: %v", err)
	}
	if _, c := dials.counts(); c != 1 {
		t.Errorf("an allowed address counted %d connects, want 1", c)
	}
}

// dialCounter counts what a fetcher dials and connects to.
type dialCounter struct {
	mu              sync.Mutex
	dialed, connect []string
}

func countDials(f *fetcher) *dialCounter {
	c := &dialCounter{}
	f.onDial = func(addr string) { c.mu.Lock(); c.dialed = append(c.dialed, addr); c.mu.Unlock() }
	f.onConnect = func(addr string) { c.mu.Lock(); c.connect = append(c.connect, addr); c.mu.Unlock() }
	return c
}

func (c *dialCounter) counts() (dials, connects int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.dialed), len(c.connect)
}

// dialedHost reports whether any dial or connect named host.
func (c *dialCounter) dialedHost(host string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range append(slices.Clone(c.dialed), c.connect...) {
		if h, _, err := net.SplitHostPort(a); err == nil && h == host {
			return true
		}
	}
	return false
}

// A name is checked when it is dialled, on the address it resolved to:
// "localhost" is not an IP literal, so only the dial-time check can refuse it.
func TestURLFetchRefusesNamesResolvingToLoopback(t *testing.T) {
	addrs, err := net.DefaultResolver.LookupHost(context.Background(), "localhost")
	if err != nil || len(addrs) == 0 {
		t.Skipf("localhost does not resolve here (%v)", err)
	}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") })
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	f := newFixture(t, nil)
	e := mustFail(t, f.set, "url_fetch", args("url", "http://localhost:"+port+"/"), tool.ClassForbidden)
	if !strings.Contains(e.Message, "loopback") {
		t.Errorf("message %q", e.Message)
	}
	if srv.hits.Load() != 0 {
		t.Errorf("the request reached the server")
	}
	// Allowed by name, the same URL is fetched.
	f = newFixture(t, &Options{URLFetch: URLFetchOptions{Allow: []string{"LOCALHOST:" + port}}})
	res, err := call(t, f.set, "url_fetch", args("url", "http://localhost:"+port+"/"))
	if r := fetchResultOf(t, res, err); r.Content != "reached" {
		t.Errorf("allowlisted by name: %+v", r)
	}
}

func TestURLFetchRedirects(t *testing.T) {
	refused := newServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "refused server reached") })
	allowed := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/to-refused":
			http.Redirect(w, r, refused.URL+"/", http.StatusFound)
		case r.URL.Path == "/to-private":
			http.Redirect(w, r, "http://10.0.0.1/admin", http.StatusMovedPermanently)
		case r.URL.Path == "/to-localhost":
			http.Redirect(w, r, "http://localhost:"+refused.URL[strings.LastIndex(refused.URL, ":")+1:]+"/", http.StatusFound)
		case r.URL.Path == "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/hop/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop/"))
			if n == 0 {
				fmt.Fprint(w, "arrived")
				return
			}
			http.Redirect(w, r, "/hop/"+strconv.Itoa(n-1), http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	})
	f := newFixture(t, &Options{URLFetch: URLFetchOptions{Allow: []string{allowed.hostPort()}}})
	dials := countDials(f.set.fetch)

	e := mustFail(t, f.set, "url_fetch", args("url", allowed.URL+"/to-private"), tool.ClassForbidden)
	if !strings.Contains(e.Message, "10.0.0.1") || dials.dialedHost("10.0.0.1") {
		t.Errorf("redirect to 10.0.0.1: %q; dialled it: %v", e.Message, dials.dialedHost("10.0.0.1"))
	}
	mustFail(t, f.set, "url_fetch", args("url", allowed.URL+"/to-refused"), tool.ClassForbidden)
	if _, err := net.DefaultResolver.LookupHost(context.Background(), "localhost"); err == nil {
		mustFail(t, f.set, "url_fetch", args("url", allowed.URL+"/to-localhost"), tool.ClassForbidden)
	}
	if n := refused.hits.Load(); n != 0 {
		t.Errorf("redirects reached the refused server %d times", n)
	}
	mustFail(t, f.set, "url_fetch", args("url", allowed.URL+"/to-file"), tool.ClassValidation)

	res, err := call(t, f.set, "url_fetch", args("url", allowed.URL+"/hop/5"))
	if r := fetchResultOf(t, res, err); res.IsError || r.Content != "arrived" || r.FinalURL != allowed.URL+"/hop/0" {
		t.Errorf("5 redirects: %+v", r)
	}
	e = mustFail(t, f.set, "url_fetch", args("url", allowed.URL+"/hop/6"), tool.ClassExecutionFailure)
	if !strings.Contains(e.Message, "5 redirects") {
		t.Errorf("6 redirects: %q", e.Message)
	}
}

func TestURLFetchBody(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page.html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<html><head><title>T</title><script>var secret=1;</script><style>p{}</style></head>
<body><h1>Head</h1><p>Some <b>bold</b> text and <a href="/next">a link</a>.</p></body></html>`)
		case "/accents":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, "éééééé")
		case "/missing":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, "no such page")
		case "/image":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"))
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte(strings.Repeat("z", 5000)))
		case "/slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		}
	})
	f := newFixture(t, &Options{URLFetch: URLFetchOptions{Allow: []string{srv.hostPort()}, Timeout: 500 * time.Millisecond, MaxBytes: 1000}})

	res, err := call(t, f.set, "url_fetch", args("url", srv.URL+"/page.html"))
	r := fetchResultOf(t, res, err)
	if want := "T\n\n# Head\n\nSome bold text and [a link](" + srv.URL + "/next)."; r.Content != want {
		t.Errorf("HTML as text:\n%q\nwant\n%q", r.Content, want)
	}
	res, err = call(t, f.set, "url_fetch", args("url", srv.URL+"/accents", "max_length", 4))
	if r := fetchResultOf(t, res, err); r.Content != "éééé" || !r.Truncated {
		t.Errorf("max_length 4 characters: %q truncated %v", r.Content, r.Truncated)
	}
	res, err = call(t, f.set, "url_fetch", args("url", srv.URL+"/missing"))
	r = fetchResultOf(t, res, err)
	if !res.IsError || r.Status != 404 || r.Error == nil || r.Error.Class != tool.ClassNotFound || r.Content != "no such page" {
		t.Errorf("404: IsError %v %+v", res.IsError, r)
	}
	res, err = call(t, f.set, "url_fetch", args("url", srv.URL+"/image"))
	if r := fetchResultOf(t, res, err); !r.Binary || r.Content != "" || res.IsError {
		t.Errorf("binary body: %+v", r)
	}
	res, err = call(t, f.set, "url_fetch", args("url", srv.URL+"/big"))
	if r := fetchResultOf(t, res, err); len(r.Content) != 1000 || !r.Truncated {
		t.Errorf("body over MaxBytes: %d bytes, truncated %v", len(r.Content), r.Truncated)
	}
	// /slow answers (empty, 200) only after 5s: a timeout class proves the
	// 500ms timeout ended the fetch, with no wall-clock upper bound.
	start := time.Now()
	mustFail(t, f.set, "url_fetch", args("url", srv.URL+"/slow"), tool.ClassTimeout)
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("the 500ms timeout ended the fetch after %v", d)
	}
}

func TestURLFetchValidation(t *testing.T) {
	f := newFixture(t, nil)
	for _, u := range []string{"ftp://example.com/x", "file:///etc/passwd", "example.com/page", "http:///nohost", "gopher://10.0.0.1/", "http://user:pw@example.com/"} {
		mustFail(t, f.set, "url_fetch", args("url", u), tool.ClassValidation)
	}
}

// The caller going away mid-request is a Go error: the request may have
// reached the server.
func TestURLFetchCancellation(t *testing.T) {
	arrived := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	})
	f := newFixture(t, &Options{URLFetch: URLFetchOptions{Allow: []string{srv.hostPort()}}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	_, err := invoke(ctx, f.set, "url_fetch", args("url", srv.URL))
	if !errors.Is(err, context.Canceled) || errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("error %v: want context.Canceled, not ErrNotStarted", err)
	}
}

func TestRefusedAddr(t *testing.T) {
	for s, want := range map[string]string{
		"127.0.0.1": "loopback", "::1": "loopback", "10.1.2.3": "private", "172.31.255.255": "private",
		"192.168.0.1": "private", "fc00::1": "private", "fdff::1": "private", "169.254.0.1": "link-local",
		"fe80::1": "link-local", "0.0.0.0": "unspecified", "::": "unspecified", "224.0.0.251": "multicast",
		"ff05::2": "multicast", "::ffff:10.0.0.1": "private", "64:ff9b::7f00:1": "loopback",
		"0.1.2.3": "special-purpose (0.0.0.0/8)", "100.127.0.1": "special-purpose (100.64.0.0/10)",
		"8.8.8.8": "", "2001:4860:4860::8888": "", "172.32.0.1": "", "1.1.1.1": "", "100.128.0.1": "",
	} {
		if got := refusedAddr(netip.MustParseAddr(s)); got != want {
			t.Errorf("refusedAddr(%s) = %q, want %q", s, got, want)
		}
	}
}

func TestNormHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"LocalHost:80": "localhost:80", "127.0.0.1:8080": "127.0.0.1:8080", "[::FFFF:127.0.0.1]:1": "127.0.0.1:1",
		"[::1]:443": "[::1]:443", "example.com.:80": "example.com:80",
	} {
		if got, err := normHostPort(in); err != nil || got != want {
			t.Errorf("normHostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"example.com", ":80", "host:0", "host:http", "host:70000"} {
		if _, err := normHostPort(bad); err == nil {
			t.Errorf("normHostPort(%q) accepted", bad)
		}
	}
}

// TestURLFetchRefusesSpecialPurposeRanges: the special-purpose ranges of
// the IANA registries a hand list missed (issue 12, finding 14) are refused
// by the dialer's check (the hook run in Control, before connect(2); called
// here directly, so nothing is dialled) and, as literals, by url_fetch
// before any connection; public addresses pass the check.
func TestURLFetchRefusesSpecialPurposeRanges(t *testing.T) {
	f := newFixture(t, nil)
	for _, addr := range []string{
		"[::8.8.8.8]:80",          // ::/96, IPv4-compatible
		"[2002:808:808::1]:80",    // 6to4 2002::/16
		"[64:ff9b:1::808:808]:80", // local-use NAT64 64:ff9b:1::/48
		"198.18.0.1:80",           // benchmarking 198.18.0.0/15
		"198.19.255.254:443",      //
		"240.0.0.1:80",            // reserved 240.0.0.0/4
		"255.255.255.255:80",      // broadcast
		"192.0.2.10:80",           // documentation
		"[2001:db8::1]:80",        // documentation
		"[64:ff9b::7f00:1]:80",    // NAT64 of 127.0.0.1
	} {
		err := f.set.fetch.control(addr)("tcp", addr, nil)
		var te *toolError
		if !errors.As(err, &te) || te.class != tool.ClassForbidden {
			// Never fetched then: that would send traffic off this host.
			t.Errorf("checkDial %s: %v, want a forbidden refusal", addr, err)
			continue
		}
		u := "http://" + addr + "/"
		res, gerr := call(t, f.set, "url_fetch", args("url", u))
		if e := errorOf(t, "url_fetch", nil, res, gerr); e.Class != string(tool.ClassForbidden) {
			t.Errorf("url_fetch %s: %+v, want forbidden", u, e)
		}
	}
	for _, addr := range []string{"8.8.8.8:443", "[2606:4700::1111]:443", "[64:ff9b::808:808]:80"} {
		if err := f.set.fetch.control(addr)("tcp", addr, nil); err != nil {
			t.Errorf("checkDial %s: %v, want it allowed", addr, err)
		}
	}
}
