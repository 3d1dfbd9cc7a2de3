package tlsreload

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned writes a self-signed pair with serial to dir's cert and key.
func selfSigned(t *testing.T, dir string, serial int64) Files {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	f := Files{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "k.pem")}
	write(t, f.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	write(t, f.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return f
}

func write(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(name+".tmp", name); err != nil {
		t.Fatal(err)
	}
}

// served is the serial the configuration hands a handshake.
func served(t *testing.T, r *Reloader) int64 {
	t.Helper()
	c, err := r.Config().GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if c.MinVersion != tls.VersionTLS12 || c.GetConfigForClient != nil {
		t.Errorf("config: min version %x, nested GetConfigForClient %v", c.MinVersion, c.GetConfigForClient != nil)
	}
	leaf, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	f := selfSigned(t, dir, 1)
	if _, err := New(Files{CertFile: f.CertFile, KeyFile: filepath.Join(dir, "missing")}, nil); err == nil {
		t.Fatal("New with a missing key: no error")
	}
	r, err := New(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := served(t, r); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	// A change is not looked at before the check window ends...
	selfSigned(t, dir, 2)
	if s := served(t, r); s != 1 {
		t.Errorf("within the window: serial %d, want 1 still", s)
	}
	// ...and is taken at the first handshake after it.
	r.next.Store(0)
	if s := served(t, r); s != 2 {
		t.Errorf("after the window: serial %d, want 2", s)
	}
	// A pair that does not load keeps the one in force, on Reload and on
	// a handshake.
	write(t, f.KeyFile, []byte("not a key"))
	if err := r.Reload(); err == nil {
		t.Error("Reload of a bad key: no error")
	}
	r.next.Store(0)
	if s := served(t, r); s != 2 {
		t.Errorf("after a bad key: serial %d, want 2", s)
	}
	// A client CA file that holds no certificate is refused too.
	f.ClientCAFile = filepath.Join(dir, "ca.pem")
	write(t, f.ClientCAFile, []byte("nothing"))
	selfSigned(t, dir, 3)
	if _, err := New(f, nil); err == nil {
		t.Error("New with an empty CA file: no error")
	}
}
