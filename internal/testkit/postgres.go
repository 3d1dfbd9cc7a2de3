package testkit

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// dropTimeout bounds the cleanup of PostgresSchema: connecting and
// dropping the schema. A database that does not answer (down, or the
// DROP waiting for a lock a leaked connection holds) fails the test after
// it instead of hanging the test binary until go test's own timeout.
var dropTimeout = 30 * time.Second

// PostgresURLEnv names the PostgreSQL database the tests may create and
// drop schemas in (.ci/run sets it to a database on 127.0.0.1).
const PostgresURLEnv = "BACKPLANE_TEST_POSTGRES_URL"

// PostgresSchema returns the URL of a fresh schema (not created: the
// store creates it when it opens) in the database PostgresURLEnv names,
// with its search_path set, and the schema's name; the schema is dropped
// when the test ends. The test skips, saying why, when the variable is
// unset. A drop that does not finish within dropTimeout (30 s) fails the
// test, naming the schema left behind (pgx cancels the statement, or
// gives up connecting, when the time is up).
func PostgresSchema(t testing.TB) (storeURL, schema string) {
	t.Helper()
	base := os.Getenv(PostgresURLEnv)
	if base == "" {
		t.Skip(PostgresURLEnv + " is unset: it names a PostgreSQL database the test creates and drops a schema in " +
			"(e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", PostgresURLEnv, err)
	}
	schema = "bp_test_" + strings.ToLower(rand.Text()[:12])
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		leftBehind := func(err error) {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: no answer within %s", err, dropTimeout)
			}
			t.Errorf("drop schema %s: %v; it is left behind in the database (DROP SCHEMA %s CASCADE removes it)", schema, err, schema)
		}
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			leftBehind(err)
			return
		}
		defer c.Close(ctx) // before cancel: within what is left of the bound
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			leftBehind(err)
		}
	})
	return u.String(), schema
}
