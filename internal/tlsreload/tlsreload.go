// Package tlsreload serves a certificate pair (and optionally a client CA
// bundle) that can change on disk while the server runs: a cert-manager
// or ACME renewal, a Kubernetes Secret's symlink swap, an operator's
// copy. The files are re-read on Reload (serve calls it on SIGHUP) and,
// on a handshake, when their size, modification time or inode changed
// (looked at no more than once a second, so a flood of handshakes costs
// one stat a second). A new set that does not load is refused with a
// warning and the old one goes on: a half-written renewal must not take
// the listener down. Connections already open keep what they were opened
// with; nothing here closes them.
package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// checkEvery bounds how often a handshake looks at the files.
const checkEvery = time.Second

// Files names the PEM files to serve.
type Files struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the server verify the client
	// certificates it is given (none is required).
	ClientCAFile string
}

// loaded is one consistent set: what a handshake uses.
type loaded struct {
	cert  *tls.Certificate
	pool  *x509.CertPool // nil without a client CA file
	stamp string         // the files' size, mtime and inode when read
}

// Reloader holds the current set. Its zero value is not usable: New.
type Reloader struct {
	files Files
	log   *slog.Logger
	cur   atomic.Pointer[loaded]
	// next is when a handshake may look at the files again (unix nanos).
	next atomic.Int64
	mu   sync.Mutex // one reload at a time
	// seen is the stamp last tried, loaded or refused: a refused set is
	// logged once, not at every handshake, and tried again when it
	// changes.
	seen string
}

// New loads the files, or says why they do not load.
func New(files Files, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{files: files, log: log}
	l, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(l)
	r.seen = l.stamp
	r.next.Store(time.Now().Add(checkEvery).UnixNano())
	return r, nil
}

// Config is the server's TLS configuration: TLS 1.2 and later with Go's
// default cipher suites and curves, the current certificate at each
// handshake, and client certificates verified against the current CAs
// when there are some (VerifyClientCertIfGiven: a client without one
// still connects, to show a bearer token).
func (r *Reloader) Config() *tls.Config {
	// NextProtos as http.Server.ServeTLS would set them: the config a
	// handshake uses is the one returned below, cloned from this one, not
	// the server's own clone.
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		r.maybeReload()
		l := r.cur.Load()
		c := base.Clone()
		c.GetConfigForClient = nil
		c.Certificates = []tls.Certificate{*l.cert}
		if l.pool != nil {
			c.ClientCAs = l.pool
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
		return c, nil
	}
	return base
}

// Certificate is the certificate served now.
func (r *Reloader) Certificate() *x509.Certificate { return r.cur.Load().cert.Leaf }

// Reload re-reads the files now. On error the old set stays, and the
// error says why.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, err := r.load()
	if err != nil {
		r.seen = r.stampOrEmpty()
		return err
	}
	r.seen = l.stamp
	old := r.cur.Swap(l)
	if old.stamp != l.stamp || old.cert.Leaf.SerialNumber.Cmp(l.cert.Leaf.SerialNumber) != 0 {
		r.log.Info("TLS certificate loaded", "file", r.files.CertFile, "subject", l.cert.Leaf.Subject.String(),
			"serial", l.cert.Leaf.SerialNumber.Text(16), "not_after", l.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// maybeReload reloads when the files changed, at most once per checkEvery.
func (r *Reloader) maybeReload() {
	now := time.Now()
	next := r.next.Load()
	if now.UnixNano() < next || !r.next.CompareAndSwap(next, now.Add(checkEvery).UnixNano()) {
		return
	}
	st := r.stampOrEmpty()
	r.mu.Lock()
	changed := st != r.seen
	r.mu.Unlock()
	if !changed {
		return
	}
	if err := r.Reload(); err != nil {
		r.log.Warn("TLS files changed but do not load: the previous certificate is still served", "error", err)
	}
}

func (r *Reloader) paths() []string {
	p := []string{r.files.CertFile, r.files.KeyFile}
	if r.files.ClientCAFile != "" {
		p = append(p, r.files.ClientCAFile)
	}
	return p
}

// stamp says, cheaply, whether the files may have changed: size,
// modification time and inode of each (through symlinks, which is how a
// Kubernetes Secret volume swaps its files).
func (r *Reloader) stamp() (string, error) {
	s := ""
	for _, p := range r.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		s += fmt.Sprintf("%d/%d/%d;", fi.Size(), fi.ModTime().UnixNano(), ino)
	}
	return s, nil
}

func (r *Reloader) stampOrEmpty() string {
	s, err := r.stamp()
	if err != nil {
		return "missing: " + err.Error()
	}
	return s
}

// load reads one set; the stamp is taken first, so that a change made
// while reading is seen at the next check.
func (r *Reloader) load() (*loaded, error) {
	st, err := r.stamp()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	// Go fills Leaf (1.23 and later); parsed here should it not, since
	// the log lines and Certificate read it.
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", r.files.CertFile, err)
		}
	}
	if time.Now().After(cert.Leaf.NotAfter) {
		// Served, still: the clients decide; the operator is told.
		r.log.Warn("the TLS certificate has expired", "file", r.files.CertFile, "not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	l := &loaded{cert: &cert, stamp: st}
	if r.files.ClientCAFile != "" {
		pem, err := os.ReadFile(r.files.ClientCAFile)
		if err != nil {
			return nil, err
		}
		l.pool = x509.NewCertPool()
		if !l.pool.AppendCertsFromPEM(pem) {
			return nil, errors.New(r.files.ClientCAFile + ": no PEM certificate in it")
		}
	}
	return l, nil
}
