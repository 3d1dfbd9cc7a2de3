package testkit

import (
	"context"
	"crypto/rand"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresURLEnv names the PostgreSQL database the tests may create and
// drop schemas in (.ci/run sets it to a database on 127.0.0.1).
const PostgresURLEnv = "BACKPLANE_TEST_POSTGRES_URL"

// PostgresSchema returns the URL of a fresh schema (not created: the
// store creates it when it opens) in the database PostgresURLEnv names,
// with its search_path set, and the schema's name; the schema is dropped
// when the test ends. The test skips, saying why, when the variable is
// unset.
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
		ctx := context.Background()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return u.String(), schema
}
