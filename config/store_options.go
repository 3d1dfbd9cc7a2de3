package config

import (
	"math"
	"regexp"
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
	switch {
	case s == "":
		return p.errAt(v, "store must name a folder or a postgres:// URL")
	case StoreKindOf(s) == StorePostgres:
	case urlScheme.MatchString(s):
		return p.errAt(v, "store %q: only folders and postgres:// URLs are supported", strings.SplitN(s, "://", 2)[0]+"://...")
	}
	c.Store = s
	return nil
}
