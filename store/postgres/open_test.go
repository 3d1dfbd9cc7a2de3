package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/postgres"
)

// Replicas starting at once on a new schema migrate it once; opening again
// changes nothing; a schema newer than this program is refused.
func TestMigrationsConcurrentAndIdempotent(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	const n = 6
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = postgres.Open(ctx, testURL(t), &postgres.Options{Schema: schema, Logger: quietLogger()})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d of %d at once: %v", i+1, n, err)
			continue
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	versions := func() string {
		t.Helper()
		rows, err := sqlConn(t, schema).Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
		must(t, err)
		defer rows.Close()
		var vs []string
		for rows.Next() {
			var v int
			must(t, rows.Scan(&v))
			vs = append(vs, fmt.Sprint(v))
		}
		must(t, rows.Err())
		return strings.Join(vs, ",")
	}
	var want []string
	for v := 1; v <= postgres.SchemaVersion; v++ {
		want = append(want, fmt.Sprint(v))
	}
	if got := versions(); got != strings.Join(want, ",") {
		t.Errorf("schema_migrations holds versions %q, want %q", got, strings.Join(want, ","))
	}
	var alive int
	must(t, sqlConn(t, schema).QueryRow(ctx, `SELECT count(*) FROM incarnations WHERE state = 'alive'`).Scan(&alive))
	if alive != n {
		t.Errorf("%d incarnations alive, want %d", alive, n)
	}

	// Again: nothing to do, and every store sees the others' writes.
	s := openStore(t, schema, nil)
	if got := versions(); got != strings.Join(want, ",") {
		t.Errorf("after reopening, versions %q", got)
	}
	_, err := s.CommitIntent(ctx, &store.CommitRequest{Intent: intent("c1", "alice")})
	must(t, err)
	if _, err := stores[0].GetIntent(ctx, "c1"); err != nil {
		t.Errorf("another store's intent: %v", err)
	}

	_, err = sqlConn(t, schema).Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, postgres.SchemaVersion+1)
	must(t, err)
	_, err = postgres.Open(ctx, testURL(t), &postgres.Options{Schema: schema, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open of a newer schema: %v, want a refusal", err)
	}
}

// Without Options.Schema the store works in the URL's search_path.
func TestSchemaFromURL(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	u, err := url.Parse(testURL(t))
	must(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String(), &postgres.Options{Logger: quietLogger()})
	must(t, err)
	defer s.Close()
	if s.Schema() != schema {
		t.Errorf("Schema() = %q, want %q", s.Schema(), schema)
	}
	_, err = s.CommitIntent(ctx, &store.CommitRequest{Intent: intent("c1", "alice")})
	must(t, err)
	var n int
	must(t, sqlConn(t, schema).QueryRow(ctx, `SELECT count(*) FROM intents WHERE call_id = 'c1'`).Scan(&n))
	if n != 1 {
		t.Errorf("%d intents c1 in schema %s, want 1", n, schema)
	}
}

// Errors of Open never show the password. (No database needed: nothing
// listens on port 1.)
func TestOpenErrorsHidePassword(t *testing.T) {
	for _, u := range []string{
		"postgres://bp:s3cretpw@127.0.0.1:1/test?sslmode=disable&connect_timeout=5",
		"postgres://bp:s3cretpw@127.0.0.1:1/test?sslmode=bogus",
		"host=127.0.0.1 port=1 user=bp password=s3cretpw dbname=test sslmode=disable connect_timeout=5",
	} {
		s, err := postgres.Open(context.Background(), u, &postgres.Options{Logger: quietLogger()})
		if err == nil {
			s.Close()
			t.Fatalf("Open(%s) succeeded", u)
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("error %q shows the password", err)
		}
	}
	if _, err := postgres.Open(context.Background(), "postgres://127.0.0.1:1/x", &postgres.Options{LeaseTTL: 3, RenewEvery: 3}); err == nil || !strings.Contains(err.Error(), "RenewEvery") {
		t.Errorf("RenewEvery not shorter than LeaseTTL: %v, want a refusal", err)
	}
}
