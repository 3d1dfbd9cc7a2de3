package config

import (
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// PostgresConfig tunes the PostgreSQL store (a postgres:// store), shared by
// several gateway replicas:
//
//	postgres:
//	  lease_ttl: 15s     # a replica whose lease is this old is declared dead by the others
//	  renew_every: 5s    # how often a replica renews its lease; shorter than lease_ttl
//	  max_conns: 16      # database connections per process
//
// The section is refused with a store that is a folder: it would have no
// effect there, and a file that says it is shared when it is not is a
// mistake worth stopping on.
//
// The lease trades recovery time against false deaths: the started calls of
// a replica that died stay started (their outcome unknown but not yet
// declared so) until lease_ttl after its last renewal; a replica that cannot
// renew within lease_ttl (a database pause, a stopped process) is declared
// dead by the others, and its calls in progress are marked uncertain.
type PostgresConfig struct {
	// LeaseTTL is how long a replica stays alive without renewing its
	// lease. Default 15s; at least 1s.
	LeaseTTL time.Duration
	// RenewEvery is how often the lease is renewed; shorter than LeaseTTL.
	// Default LeaseTTL/3.
	RenewEvery time.Duration
	// MaxConns is the most connections one process opens. 0 (the default)
	// leaves it to the URL's pool_max_conns parameter, else 16.
	MaxConns int32
	// Line is where the postgres section is (0 when absent).
	Line int
}

// Defaults of the postgres section, the same as package store/postgres's
// (a test of package assemble holds them equal).
const (
	DefaultPostgresLeaseTTL = 15 * time.Second
	// MinPostgresLeaseTTL: a shorter lease would expire on ordinary database
	// latency, and a live replica's calls would be declared uncertain.
	MinPostgresLeaseTTL = time.Second
)

func (p *parser) postgres(c *Config, k, v *yaml.Node) error {
	c.Postgres.Line = k.Line
	var ttlNode, renewNode *yaml.Node
	err := p.mapping(v, "postgres", func(key string, k, v *yaml.Node) error {
		switch key {
		case "lease_ttl":
			ttlNode = v
			d, err := p.duration(v, key)
			if err != nil {
				return err
			}
			if d < MinPostgresLeaseTTL {
				return p.errAt(v, "postgres lease_ttl %s is too short: at least %s (a shorter lease expires on ordinary database latency, and the other replicas would declare this one dead)", d, MinPostgresLeaseTTL)
			}
			c.Postgres.LeaseTTL = d
		case "renew_every":
			renewNode = v
			d, err := p.duration(v, key)
			if err != nil {
				return err
			}
			if d <= 0 {
				return p.errAt(v, "postgres renew_every must be positive")
			}
			c.Postgres.RenewEvery = d
		case "max_conns":
			n, err := p.integer(v, key)
			if err != nil {
				return err
			}
			if n < 1 || n > math.MaxInt32 {
				return p.errAt(v, "postgres max_conns must be a positive number of connections, not %d", n)
			}
			c.Postgres.MaxConns = int32(n)
		}
		return nil
	}, "lease_ttl", "renew_every", "max_conns")
	if err != nil {
		return err
	}
	ttl := c.Postgres.LeaseTTL
	if ttl == 0 {
		ttl = DefaultPostgresLeaseTTL
	}
	if renewNode != nil && c.Postgres.RenewEvery >= ttl {
		what := "the default lease_ttl"
		if ttlNode != nil {
			what = "lease_ttl"
		}
		return p.errAt(renewNode, "postgres renew_every %s must be shorter than %s %s: the lease would expire between renewals", c.Postgres.RenewEvery, what, ttl)
	}
	return nil
}

// finishPostgres refuses the section with a store that is not PostgreSQL,
// and fills in the lease defaults with one that is.
func (p *parser) finishPostgres(c *Config) error {
	if StoreKindOf(c.Store) != StorePostgres {
		if c.Postgres.Line > 0 {
			return &Error{File: p.file, Line: c.Postgres.Line,
				Msg: "postgres options given but the store is a folder (" + c.Store + "): they apply only to a postgres:// store"}
		}
		return nil
	}
	if c.Postgres.LeaseTTL == 0 {
		c.Postgres.LeaseTTL = DefaultPostgresLeaseTTL
	}
	if c.Postgres.RenewEvery == 0 {
		c.Postgres.RenewEvery = c.Postgres.LeaseTTL / 3
	}
	return nil
}

var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

func (p *parser) store(c *Config, v *yaml.Node) error {
	s, err := p.str(v, "store")
	if err != nil {
		return err
	}
	if err := p.oneStore(v, "store"); err != nil {
		return err
	}
	return p.setStore(c, v, s, "store")
}

// oneStore refuses a second of store, store_env and store_file.
func (p *parser) oneStore(v *yaml.Node, key string) error {
	if p.storeKey != "" {
		return p.errAt(v, "%s: give one of store, store_env and store_file (%s is given too)", key, p.storeKey)
	}
	p.storeKey = key
	return nil
}

// setStore checks s, the store given by what, and sets it. Its messages
// never hold s (it may hold a password): a URL's scheme at most.
func (p *parser) setStore(c *Config, v *yaml.Node, s, what string) error {
	switch {
	case s == "":
		return p.errAt(v, "%s must name a folder or a postgres:// URL", what)
	case StoreKindOf(s) == StorePostgres:
	case urlScheme.MatchString(s):
		return p.errAt(v, "%s %q: only folders and postgres:// URLs are supported", what, strings.SplitN(s, "://", 2)[0]+"://...")
	}
	c.Store = s
	return nil
}

// storeFrom reads the store from an environment variable (store_env) or a
// file (store_file, relative to the configuration's folder; surrounding
// white space trimmed), so that a PostgreSQL URL with its password stays
// out of the configuration file. A file others may read or write, or that
// its group may write, is refused (checkSecretMode). The value is
// checked as store's is, and never printed.
func (p *parser) storeFrom(c *Config, key string, v *yaml.Node) error {
	name, err := p.str(v, key)
	if err != nil {
		return err
	}
	if err := p.oneStore(v, key); err != nil {
		return err
	}
	var s string
	switch key {
	case "store_env":
		if !envName.MatchString(name) {
			return p.errAt(v, "store_env: %q is not an environment variable name", name)
		}
		if s = os.Getenv(name); strings.TrimSpace(s) == "" {
			return p.errAt(v, "store_env %s is not set or empty", name)
		}
	case "store_file":
		if name == "" {
			return p.errAt(v, "store_file needs a file name")
		}
		b, err := readSecretFile(resolve(c.Dir, name))
		if err != nil {
			return p.errAt(v, "store_file: %v", err)
		}
		if s = string(b); strings.TrimSpace(s) == "" {
			return p.errAt(v, "store_file %s is empty", name)
		}
	}
	if err := p.setStore(c, v, strings.TrimSpace(s), key+" "+name); err != nil {
		return err
	}
	c.StoreSource = key + " " + name
	return nil
}

// maxSecretFile bounds what readSecretFile reads: a URL or a token, far
// below it.
const maxSecretFile = 64 << 10

// readSecretFile reads a file holding a secret, refusing one that is not
// a regular file, is larger than maxSecretFile, or whose mode lets others
// read or write it or its group write it (checkSecretMode).
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if err := checkSecretMode(path, fi.Mode()); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a secret", path, maxSecretFile)
	}
	return b, nil
}

// checkSecretMode refuses a secret file others may read or write, or its
// group may write (as libpq refuses a world-readable password file). Its
// group may read it: a Kubernetes Secret volume with fsGroup, or a
// root-owned file shared with the service's group. Windows has no such
// mode bits.
func checkSecretMode(path string, m fs.FileMode) error {
	if runtime.GOOS == "windows" || m.Perm()&0o027 == 0 {
		return nil
	}
	return fmt.Errorf("%s has mode %04o, which lets others read it or its group change it: chmod 600 %s "+
		"(in Kubernetes, mount the Secret with defaultMode: 0400)", path, m.Perm(), path)
}
