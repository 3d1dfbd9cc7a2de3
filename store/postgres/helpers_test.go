package postgres_test

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store/postgres"
	"github.com/jackc/pgx/v5"
)

// URLEnv names the database the tests may create schemas in.
const URLEnv = "BACKPLANE_TEST_POSTGRES_URL"

// testURL returns the test database's URL, or skips the test.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(URLEnv)
	if u == "" {
		t.Skip(URLEnv + " is unset: it names a PostgreSQL database the PostgreSQL store tests create and drop their own schemas in " +
			"(e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	return u
}

// newSchema returns the name of a schema no one uses, dropped with
// everything in it when the test ends. The store creates it.
func newSchema(t testing.TB) string {
	t.Helper()
	u := testURL(t)
	name := "bp_test_" + strings.ToLower(rand.Text()[:12])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// quietLogger keeps test output to failures.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openStore opens a Store in schema, closed when the test ends. opts may
// be nil; its Schema is set to schema.
func openStore(t testing.TB, schema string, opts *postgres.Options) *postgres.Store {
	t.Helper()
	var o postgres.Options
	if opts != nil {
		o = *opts
	}
	o.Schema = schema
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	s, err := postgres.Open(context.Background(), testURL(t), &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// sqlConn is a plain connection into schema, for what the tests check or
// change behind the store's back; closed when the test ends.
func sqlConn(t testing.TB, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func slogText(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
