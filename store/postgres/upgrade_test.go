package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/postgres"
)

// A schema made before budget windows (version 1) is upgraded in place:
// the usage is carried over with the quota of its latest reservation and
// is still enforced.
func TestUpgradeFromSchema1(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	c := sqlConn(t, schema)
	if err := postgres.MigrateTo(ctx, c, schema, 1); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO incarnations (id, pid, state, lease_expires_at) VALUES ('old', 1, 'closed', now())`,
		`INSERT INTO intents (call_id, caller, tool, definition_hash, args_digest, incarnation, status)
			VALUES ('c1', 'alice', 'note', 'h', 'd', 'old', 'succeeded'), ('c2', 'alice', 'note', 'h', 'd', 'old', 'succeeded')`,
		`INSERT INTO reservations (call_id, scope, key, quota, amount) VALUES ('c1', 'caller', 'alice', 5, 2), ('c2', 'caller', 'alice', 7, 1)`,
		`INSERT INTO budget_usage (scope, key, used) VALUES ('caller', 'alice', 3)`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := openStore(t, schema, nil)
	us, err := s.BudgetUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Used != 3 || us[0].Quota != 7 || !us[0].Window.IsZero() {
		t.Errorf("usage after the upgrade = %+v, want caller alice used 3 of quota 7, no window", us)
	}
	_, err = s.CommitIntent(ctx, &store.CommitRequest{
		Intent:       store.Intent{CallID: "c3", Caller: "alice", Tool: "note", ArgsDigest: "d", CreatedAt: time.Now()},
		Reservations: []store.Reservation{{Scope: "caller", Key: "alice", Quota: 7, Amount: 5}},
	})
	var be *store.BudgetError
	if !errors.As(err, &be) || be.Used != 3 {
		t.Errorf("a reservation over the carried-over usage: %v, want a BudgetError with used 3", err)
	}
}
