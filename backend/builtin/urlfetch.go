package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"code.dny.dev/ssrf"

	"github.com/agentbackplane/backplane/tool"
)

// MaxRedirects is how many redirects url_fetch follows.
const MaxRedirects = 5

// fetcher is url_fetch's HTTP client. Its dialer checks the address it is
// about to connect to, after name resolution, for every connection (the
// first and each redirect's): what the name resolved to a moment earlier
// does not count, so a name that changes its answer (DNS rebinding) gains
// nothing.
type fetcher struct {
	client   *http.Client
	timeout  time.Duration
	maxBytes int
	allow    map[string]bool // normalised host:port

	// Test hooks, nil in use: onDial is called as a connection is asked
	// for (addr as in the URL), onConnect once an address passed the check,
	// just before connect(2). They let tests prove that a refusal happened
	// before any dial or connect by counting, not by timing.
	onDial    func(addr string)
	onConnect func(address string)
}

func newFetcher(o URLFetchOptions) (*fetcher, error) {
	if o.Timeout < 0 || o.MaxBytes < 0 {
		return nil, errors.New("builtin: url_fetch timeout and max bytes must not be negative")
	}
	f := &fetcher{timeout: o.Timeout, maxBytes: o.MaxBytes, allow: map[string]bool{}}
	if f.timeout == 0 {
		f.timeout = DefaultURLFetchTimeout
	}
	if f.maxBytes == 0 {
		f.maxBytes = DefaultURLFetchMaxBytes
	}
	for _, e := range o.Allow {
		n, err := normHostPort(e)
		if err != nil {
			return nil, fmt.Errorf("builtin: url_fetch allow entry %q: want host:port (%v)", e, err)
		}
		f.allow[n] = true
	}
	tr := &http.Transport{
		// No proxy: the address checked must be the address connected to.
		Proxy:                  nil,
		DialContext:            f.dial,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  f.timeout,
		MaxResponseHeaderBytes: 1 << 20,
		IdleConnTimeout:        30 * time.Second,
		MaxIdleConnsPerHost:    2,
	}
	f.client = &http.Client{
		Transport: tr,
		Timeout:   f.timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > MaxRedirects {
				return fail(tool.ClassExecutionFailure, "stopped after %d redirects (the last one to %s)", MaxRedirects, req.URL.Redacted())
			}
			return f.checkURL(req.URL)
		},
	}
	return f, nil
}

// normHostPort normalises a host:port: lower-case name, canonical IP form.
func normHostPort(hp string) (string, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", err
	}
	if host == "" {
		return "", errors.New("the host is empty")
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", fmt.Errorf("%q is not a port number", port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().WithZone("").String()
	} else {
		host = strings.ToLower(strings.TrimSuffix(host, "."))
	}
	return net.JoinHostPort(host, port), nil
}

func (f *fetcher) allowed(hostport string) bool {
	n, err := normHostPort(hostport)
	return err == nil && f.allow[n]
}

// checkURL refuses what can be refused before any connection: a scheme
// other than http and https, and a literal IP address that is refused. A
// name is checked when it is dialled.
func (f *fetcher) checkURL(u *url.URL) error {
	switch u.Scheme {
	case "http", "https":
	default:
		return fail(tool.ClassValidation, "%s: only http and https URLs are fetched", u.Redacted()).with("url", u.Redacted())
	}
	if u.Host == "" || u.Hostname() == "" {
		return fail(tool.ClassValidation, "%s has no host", u.Redacted()).with("url", u.Redacted())
	}
	if u.User != nil {
		// Credentials in URLs end up in logs and journals.
		return fail(tool.ClassValidation, "%s carries credentials (user@host); they are not sent", u.Redacted())
	}
	hp := hostPort(u)
	if f.allowed(hp) {
		return nil
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		if why := refusedAddr(ip); why != "" {
			return refusal(u.Redacted(), hp, ip.String(), why)
		}
	}
	return nil
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func refusal(what, hostport, ip, why string) *toolError {
	return fail(tool.ClassForbidden,
		"%s: refused to connect to %s, a %s address; allow %s in url_fetch's configuration to fetch it", what, ip, why, hostport).
		with("address", ip).with("reason", why)
}

// refusedAddr says why an address is refused, or "" when it is not:
// loopback, private (RFC 1918, RFC 4193 fc00::/7), link-local, unspecified,
// multicast by name, and every other special-purpose range of the IANA
// IPv4 and IPv6 registries (code.dny.dev/ssrf, generated from them): for
// IPv6 anything outside global unicast 2000::/3 (::/96 IPv4-compatible,
// 64:ff9b:1::/48, site-local...) and the special ranges inside it (2002::/16
// 6to4, 2001::/23...); for IPv4 198.18.0.0/15, 240.0.0.0/4, 100.64.0.0/10,
// the documentation ranges... An address in the NAT64 prefix 64:ff9b::/96
// is judged by the IPv4 address it reaches.
func refusedAddr(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() && ssrf.IPv6NAT64Prefix.Contains(ip) {
		// 64:ff9b::a.b.c.d reaches a.b.c.d through a NAT64 gateway.
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsMulticast():
		return "multicast"
	}
	if err := specialPurpose.SafeAddr(ip); err != nil {
		return "special-purpose (" + specialRange(ip) + ")"
	}
	return ""
}

// specialPurpose refuses the special-purpose ranges; ports and networks are
// not its business here.
var specialPurpose = ssrf.New(ssrf.WithAnyPort(), ssrf.WithAnyNetwork())

// specialRange names the registry range ip lies in, for the refusal.
func specialRange(ip netip.Addr) string {
	list := ssrf.IPv4DeniedPrefixes
	if ip.Is6() {
		list = ssrf.IPv6DeniedPrefixes
		if !ssrf.IPv6GlobalUnicast.Contains(ip) {
			return "outside IPv6 global unicast " + ssrf.IPv6GlobalUnicast.String()
		}
	}
	for _, p := range list {
		if p.Contains(ip) {
			return p.String()
		}
	}
	return "reserved"
}

// dial connects to addr (host:port from the URL). When it is not
// allowlisted, each IP address the dialer is about to connect to, after
// resolution, is checked in Control, before connect(2): a refused address is
// never connected to.
func (f *fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if f.onDial != nil {
		f.onDial(addr)
	}
	d := &net.Dialer{Timeout: f.timeout, Control: f.control(addr)}
	return d.DialContext(ctx, network, addr)
}

// control is the dialer's Control for a connection to addr (as in the
// URL): it checks the resolved address it is given, before connect(2).
func (f *fetcher) control(addr string) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if err := f.checkDial(addr, address); err != nil {
			return err
		}
		if f.onConnect != nil {
			f.onConnect(address)
		}
		return nil
	}
}

// checkDial is the dialer's check, in Control, before connect(2): addr is
// what the URL named, address the IP address and port about to be
// connected to.
func (f *fetcher) checkDial(addr, address string) error {
	if f.allowed(addr) || f.allowed(address) {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fail(tool.ClassForbidden, "refused to connect to %s: not an IP address and port", address)
	}
	if why := refusedAddr(ap.Addr()); why != "" {
		return refusal(addr, addr, ap.Addr().Unmap().String(), why)
	}
	return nil
}

type fetchArgs struct {
	URL       string `json:"url"`
	MaxLength *int   `json:"max_length"`
}

type fetchResult struct {
	URL         string `json:"url"`
	FinalURL    string `json:"final_url"`
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	// Content is the body as text (HTML turned into readable text), at
	// most max_length characters.
	Content string `json:"content"`
	// Truncated says the body was longer than max_length characters or
	// than the byte cap.
	Truncated bool `json:"truncated"`
	// Binary says the body is not text; it is not shown.
	Binary bool       `json:"binary,omitempty"`
	Error  *errorBody `json:"error,omitempty"`
}

func (s *Set) urlFetch(ctx context.Context, raw json.RawMessage) (*tool.Result, error) {
	var a fetchArgs
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	maxLen := DefaultURLFetchMaxLength
	if a.MaxLength != nil {
		if *a.MaxLength < 1 {
			return nil, fail(tool.ClassValidation, "max_length %d must be at least 1", *a.MaxLength)
		}
		maxLen = *a.MaxLength
	}
	u, err := url.Parse(a.URL)
	if err != nil {
		return nil, fail(tool.ClassValidation, "%q is not a URL: %v", a.URL, err)
	}
	if !u.IsAbs() {
		return nil, fail(tool.ClassValidation, "%q is not an absolute http or https URL", a.URL)
	}
	f := s.fetch
	if err := f.checkURL(u); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fail(tool.ClassValidation, "%s: %v", a.URL, err)
	}
	req.Header.Set("User-Agent", "backplane-url-fetch/1")
	req.Header.Set("Accept", "text/html, text/plain, application/json, */*;q=0.5")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, f.fetchError(ctx, a.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(f.maxBytes)+1))
	if err != nil {
		return nil, f.fetchError(ctx, a.URL, err)
	}
	res := fetchResult{URL: a.URL, FinalURL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	if len(body) > f.maxBytes {
		body, res.Truncated = body[:f.maxBytes], true
	}
	text, binary := bodyText(body, res.ContentType, resp.Request.URL, res.Truncated)
	if binary {
		res.Binary = true
	} else {
		if utf8.RuneCountInString(text) > maxLen {
			text, res.Truncated = cutRunes(text, maxLen), true
		}
		res.Content = text
	}
	if resp.StatusCode >= 400 {
		class := tool.ClassExecutionFailure
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusGone:
			class = tool.ClassNotFound
		case http.StatusUnauthorized, http.StatusForbidden:
			class = tool.ClassForbidden
		case http.StatusRequestTimeout, http.StatusGatewayTimeout:
			class = tool.ClassTimeout
		}
		res.Error = &errorBody{Class: class, Message: "HTTP " + resp.Status, Step: "invoke", Details: map[string]any{}}
	}
	return &tool.Result{Content: marshal(res), IsError: res.Error != nil}, nil
}

// fetchError classifies a failed request. A refusal of ours (scheme,
// address, redirects) is found inside the client's error; the end of the
// caller's ctx is a Go error, since the request may have reached the server.
func (f *fetcher) fetchError(ctx context.Context, u string, err error) error {
	var te *toolError
	if errors.As(err, &te) {
		return te
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("url_fetch %s: the call ended while the request was in flight: %w", u, cerr)
	}
	var dnsErr *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return fail(tool.ClassNotFound, "%s: the host %s was not found", u, dnsErr.Name)
	case errors.As(err, &ne) && ne.Timeout():
		return fail(tool.ClassTimeout, "%s: no complete answer within %v", u, f.timeout)
	}
	return fail(tool.ClassExecutionFailure, "%s: %v", u, err)
}

// bodyText turns a body into text: HTML into readable text, other text as
// it is. Binary bodies (not a text type, and a NUL byte or bytes that are
// not UTF-8 at the start) are not converted.
func bodyText(body []byte, contentType string, base *url.URL, cut bool) (string, bool) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "" {
		mt, _, _ = mime.ParseMediaType(http.DetectContentType(body))
	}
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return htmlText(body, base), false
	case textual(mt):
		return strings.ToValidUTF8(string(body), "\uFFFD"), false
	}
	head := body[:min(len(body), sniffBytes)]
	if isBinary(head, len(head) == len(body) && !cut) {
		return "", true
	}
	return strings.ToValidUTF8(string(body), "\uFFFD"), false
}

func textual(mt string) bool {
	return strings.HasPrefix(mt, "text/") || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") ||
		mt == "application/json" || mt == "application/xml" || mt == "application/javascript" ||
		mt == "application/x-javascript" || mt == "application/ecmascript" || mt == "application/x-yaml" ||
		mt == "application/yaml" || mt == "application/toml"
}

// cutRunes returns the first n characters of s.
func cutRunes(s string, n int) string {
	i := 0
	for k := range s {
		if i == n {
			return s[:k]
		}
		i++
	}
	return s
}
