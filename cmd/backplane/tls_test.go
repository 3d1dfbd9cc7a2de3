package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testCA is a certificate authority made by the test: nothing here is
// ever trusted by anything but the test's own clients and serve.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue signs a leaf: a server certificate for 127.0.0.1, or a client one
// named cn. It returns the PEM certificate and key.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func (ca *testCA) clientCert(t *testing.T, serial int64, cn string) tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, serial, cn, false)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// replaceFile writes data beside name and renames it into place, as a
// renewal tool (or a Kubernetes Secret volume) does.
func replaceFile(t *testing.T, name string, data []byte) {
	t.Helper()
	tmp := name + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

const tlsServeConfig = serveConfig + `  tls:
    cert_file: tls/server.crt
    key_file: tls/server.key
    client_ca_file: tls/clients.crt
    caller_from: cn
`

// tlsServeDir is a serve folder with a server certificate (serial 100)
// from ca and client certificates from clients.
func tlsServeDir(t *testing.T, ca, clients *testCA) *gwDir {
	t.Helper()
	g := newGWDir(t, strings.Replace(tlsServeConfig, "  - caller: bob\n", "  - caller: carol\n    allow: [read]\n  - caller: bob\n", 1))
	if err := os.WriteFile(filepath.Join(g.dir, "notes.txt"), []byte("hello from the workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(g.dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	c, k := ca.issue(t, 100, "backplane", true)
	replaceFile(t, filepath.Join(g.dir, "tls", "server.key"), k)
	replaceFile(t, filepath.Join(g.dir, "tls", "server.crt"), c)
	replaceFile(t, filepath.Join(g.dir, "tls", "clients.crt"), clients.pem)
	return g
}

var tlsListenLine = regexp.MustCompile(`url=https://(127\.0\.0\.1:\d+)/mcp`)

// startTLSServe is startServe for a TLS listener: base is https://ADDR.
func startTLSServe(t *testing.T, g *gwDir) *serveProc {
	t.Helper()
	return startProc(t, g.command("", "serve", "--http", "127.0.0.1:0"), tlsListenLine, "https://")
}

// tlsClient trusts ca only, presents cert when given, and keeps its
// connections alive (HTTP/1.1: a connection keeps the certificate it was
// opened with).
func tlsClient(ca *testCA, cert *tls.Certificate) *http.Transport {
	cfg := &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		// Sent whatever CAs the server names: Go's client would otherwise
		// send none when the issuer is not among them, and an unknown
		// CA's certificate would never reach the server's check.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Transport{TLSClientConfig: cfg}
}

type bearerRT struct {
	base  http.RoundTripper
	token string
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

// callRead makes one tools/call of read over MCP and returns its text.
func callRead(t *testing.T, p *serveProc, rt http.RoundTripper) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "go-tls-test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.base + "/mcp", HTTPClient: &http.Client{Transport: rt}}, sessionEra)
	if err != nil {
		return "", err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "notes.txt"}})
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Errorf("read returned an error result: %s", text.String())
	}
	return text.String(), nil
}

func TestServeTLS(t *testing.T) {
	ca, clients, stranger := newTestCA(t, "test server CA"), newTestCA(t, "test client CA"), newTestCA(t, "someone else's CA")
	g := tlsServeDir(t, ca, clients)
	p := startTLSServe(t, g)
	if log := p.log(); !strings.Contains(log, "tls: certificate") || !strings.Contains(log, "its cn names the caller") {
		t.Errorf("serve does not say how it serves TLS:\n%s", log)
	}
	if !strings.Contains(p.log(), "warning: the TLS key") {
		t.Errorf("the key lies in the workspace, and serve does not warn:\n%s", p.log())
	}

	// A bearer token over https, through the MCP SDK's client.
	text, err := callRead(t, p, bearerRT{tlsClient(ca, nil), "alice-token"})
	if err != nil || !strings.Contains(text, "hello from the workspace") {
		t.Fatalf("read over https as alice: %q, %v\n%s", text, err, p.log())
	}
	// The same over HTTP/2 (what Go's own clients negotiate by default).
	h2 := tlsClient(ca, nil)
	h2.ForceAttemptHTTP2 = true
	text, err = callRead(t, p, bearerRT{h2, "alice-token"})
	if err != nil || !strings.Contains(text, "hello from the workspace") {
		t.Fatalf("read over HTTP/2 as alice: %q, %v\n%s", text, err, p.log())
	}
	if resp, err := (&http.Client{Transport: h2}).Get(p.base + "/healthz"); err != nil || resp.ProtoMajor != 2 {
		t.Errorf("HTTP/2 was not negotiated: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// A client certificate names carol; no token.
	carol := clients.clientCert(t, 7, "carol")
	text, err = callRead(t, p, tlsClient(ca, &carol))
	if err != nil || !strings.Contains(text, "hello from the workspace") {
		t.Fatalf("read over https with carol's certificate: %q, %v\n%s", text, err, p.log())
	}
	callers := map[string]int{}
	for _, in := range g.journal(t) {
		callers[in["caller"].(string)]++
	}
	if callers["alice"] != 2 || callers["carol"] != 1 || len(callers) != 2 {
		t.Errorf("journal callers %v: want two reads by alice and one by carol", callers)
	}

	post := func(rt http.RoundTripper) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, p.base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := (&http.Client{Transport: rt, Timeout: 30 * time.Second}).Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	// A certificate from a CA serve does not trust fails the handshake.
	dave := stranger.clientCert(t, 8, "dave")
	if resp, err := post(tlsClient(ca, &dave)); err == nil {
		t.Errorf("a certificate from an unknown CA: %s, want a failed handshake", resp.Status)
	}
	// A verified certificate whose name is no caller's name: 401.
	bell := clients.clientCert(t, 9, "car\x07ol")
	if resp, err := post(tlsClient(ca, &bell)); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a certificate naming %q: %v %v, want 401", "car\x07ol", resp, err)
	}
	// Neither a certificate nor a token: 401.
	if resp, err := post(tlsClient(ca, nil)); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no certificate, no token: %v %v, want 401", resp, err)
	}
	// Plain HTTP to the TLS listener is refused (net/http answers 400).
	resp, err := http.Get("http://" + strings.TrimPrefix(p.base, "https://") + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS listener: %s, want 400", resp.Status)
		}
	}
	// Failed handshakes reach serve's log through its throttled refusal
	// lines, not net/http's own unbounded logger.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(p.log(), "TLS listener: connection refused or failed"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for the refused handshakes:\n%s", p.log())
		}
	}
	// /healthz is open over https.
	hc := &http.Client{Transport: tlsClient(ca, nil), Timeout: 30 * time.Second}
	resp, err = hc.Get(p.base + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz over https: %v %v", resp, err)
	}
	resp.Body.Close()
	// The console's login cookie is Secure over TLS.
	nofollow := &http.Client{Transport: tlsClient(ca, nil), Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = nofollow.PostForm(p.base+"/ui/login", map[string][]string{"token": {"ops-token"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cks := resp.Cookies(); resp.StatusCode != http.StatusSeeOther || len(cks) != 1 || !cks[0].Secure {
		t.Errorf("console login over https: %s, cookies %+v, want one Secure cookie", resp.Status, cks)
	}
	if err := p.stop(t); err != nil {
		t.Errorf("serve's exit: %v\n%s", err, p.log())
	}
}

// TestServeTLSRotation: certificate files replaced on disk are served at
// the next handshakes, without SIGHUP, while a connection opened before
// goes on with the old certificate; a pair that does not load (on SIGHUP)
// keeps the one in force.
func TestServeTLSRotation(t *testing.T) {
	ca, clients := newTestCA(t, "test server CA"), newTestCA(t, "test client CA")
	g := tlsServeDir(t, ca, clients)
	p := startTLSServe(t, g)

	// serial asks /healthz, on a kept-alive connection (old) or a new one.
	serial := func(c *http.Client) int64 {
		t.Helper()
		resp, err := c.Get(p.base + "/healthz")
		if err != nil {
			t.Fatalf("/healthz: %v\n%s", err, p.log())
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.TLS == nil {
			t.Fatalf("/healthz: %s", resp.Status)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	old := &http.Client{Transport: tlsClient(ca, nil), Timeout: 30 * time.Second}
	fresh := func() *http.Client {
		tr := tlsClient(ca, nil)
		tr.DisableKeepAlives = true
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	if s := serial(old); s != 100 {
		t.Fatalf("serial %d at start, want 100", s)
	}

	c, k := ca.issue(t, 200, "backplane", true)
	replaceFile(t, filepath.Join(g.dir, "tls", "server.key"), k)
	replaceFile(t, filepath.Join(g.dir, "tls", "server.crt"), c)
	// The files are looked at at most once a second: wait for it, however
	// slow the machine, keeping the old connection busy meanwhile (the
	// server closes connections idle for 20s).
	for deadline := time.Now().Add(60 * time.Second); serial(fresh()) != 200; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate was not served within 60s:\n%s", p.log())
		}
		if s := serial(old); s != 100 {
			t.Fatalf("the kept-alive connection now shows serial %d: it was dropped and reopened", s)
		}
	}
	if s := serial(old); s != 100 {
		t.Errorf("after the rotation the kept-alive connection shows serial %d, want 100 (the same connection)", s)
	}

	// A certificate that is not PEM, then SIGHUP: refused, the one in
	// force stays.
	replaceFile(t, filepath.Join(g.dir, "tls", "server.crt"), []byte("not a certificate\n"))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.log(), "SIGHUP: the TLS files do not load"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the bad files within 30s of SIGHUP:\n%s", p.log())
		}
	}
	if s := serial(fresh()); s != 200 {
		t.Errorf("after a bad pair, a new connection shows serial %d, want 200 (the pair in force)", s)
	}
	if err := p.stop(t); err != nil {
		t.Errorf("serve's exit: %v\n%s", err, p.log())
	}
}
