package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/postgres"
	"github.com/jackc/pgx/v5"
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
		Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 7, Amount: 5}},
	})
	var be *store.BudgetError
	if !errors.As(err, &be) || be.Used != 3 {
		t.Errorf("a reservation over the carried-over usage: %v, want a BudgetError with used 3", err)
	}
}

// A schema of version 3 loses its two foreign keys (version 4) and keeps
// its rows: a started intent of a dead replica is recovered, its
// reservation is still held and released by a failure verdict, and the
// upgraded store commits, settles and prunes as a new one does.
func TestUpgradeFromSchema3(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	c := sqlConn(t, schema)
	if err := postgres.MigrateTo(ctx, c, schema, 3); err != nil {
		t.Fatal(err)
	}
	foreignKeys := func() int {
		t.Helper()
		var n int
		must(t, c.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = $1::regnamespace`,
			pgx.Identifier{schema}.Sanitize()).Scan(&n))
		return n
	}
	if n := foreignKeys(); n != 2 {
		t.Fatalf("schema 3 has %d foreign keys, want 2 (the test no longer starts from schema 3)", n)
	}
	for _, q := range []string{
		`INSERT INTO incarnations (id, pid, state, lease_expires_at) VALUES ('old', 1, 'alive', now() - interval '1 hour')`,
		`INSERT INTO intents (call_id, caller, tool, definition_hash, args_digest, incarnation, status)
			VALUES ('c1', 'alice', 'note', 'h', 'd', 'old', 'started')`,
		`INSERT INTO reservations (call_id, scope, key, quota, amount) VALUES ('c1', 'caller', 'alice', 5, 2)`,
		`INSERT INTO budget_usage (scope, key, quota, used) VALUES ('caller', 'alice', 5, 2)`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := openStore(t, schema, nil) // migrates, then recovers 'old'
	if n := foreignKeys(); n != 0 {
		t.Errorf("%d foreign keys after the upgrade, want none", n)
	}
	in, err := s.GetIntent(ctx, "c1")
	if err != nil || in.Status != store.StatusUncertain {
		t.Fatalf("the dead replica's intent after the upgrade: %+v, %v; want uncertain", in, err)
	}
	must(t, s.ResolveIntent(ctx, "c1", false, "op", time.Now()))
	_, err = s.CommitIntent(ctx, &store.CommitRequest{
		Intent:       store.Intent{CallID: "c2", Caller: "alice", Tool: "note", ArgsDigest: "d", CreatedAt: time.Now()},
		Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 5, Amount: 5}},
	})
	if err != nil {
		t.Fatalf("a reservation of the whole quota once c1's is released: %v", err)
	}
	must(t, s.Settle(ctx, "c2", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}))
	r, err := s.Prune(ctx, time.Now().Add(time.Hour))
	must(t, err)
	if r.Intents != 2 || r.Reservations != 2 {
		t.Errorf("prune after the upgrade: %+v, want both intents and their two reservations", r)
	}
}

// A schema of version 6 (settlements written into the intents' rows)
// becomes append-only (version 7) and keeps its rows: each settled intent
// keeps its status, result and error as a settlement row, a started intent
// of a dead replica is recovered as uncertain, the idempotency key still
// finds its intent, the lists by status see the old rows, and the upgraded
// store settles, resolves and prunes them as it does new ones.
func TestUpgradeFromSchema6(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	c := sqlConn(t, schema)
	if err := postgres.MigrateTo(ctx, c, schema, 6); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO incarnations (id, pid, state, lease_expires_at) VALUES ('old', 1, 'alive', now() - interval '1 hour')`,
		`INSERT INTO intents (call_id, caller, tool, definition_hash, args_digest, idempotency_key, incarnation, status,
				result, error_class, error_message, created_at, settled_at) VALUES
			('ok', 'alice', 'note', 'h', 'd', 'k1', 'old', 'succeeded', '\x7b7d', '', '', now(), now()),
			('bad', 'alice', 'note', 'h', 'd', NULL, 'old', 'failed', NULL, 'backend', 'it broke', now(), now()),
			('odd', 'alice', 'note', 'h', 'd', NULL, 'old', 'uncertain', NULL, 'unknown_outcome', 'lost', now(), now()),
			('run', 'alice', 'note', 'h', 'd', NULL, 'old', 'started', NULL, '', '', now(), NULL)`,
		`INSERT INTO reservations (call_id, scope, key, quota, amount) VALUES ('odd', 'caller', 'alice', 10, 4), ('run', 'caller', 'alice', 10, 3)`,
		`INSERT INTO budget_usage (scope, key, quota, used) VALUES ('caller', 'alice', 10, 7)`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := openStore(t, schema, nil) // migrates, then recovers 'old'
	want := map[string]struct {
		status        store.Status
		result, class string
	}{
		"ok":  {store.StatusSucceeded, "{}", ""},
		"bad": {store.StatusFailed, "", "backend"},
		"odd": {store.StatusUncertain, "", "unknown_outcome"},
		"run": {store.StatusUncertain, "", "unknown_outcome"},
	}
	for id, w := range want {
		in, err := s.GetIntent(ctx, id)
		must(t, err)
		if in.Status != w.status || string(in.Result) != w.result || in.ErrorClass != w.class {
			t.Errorf("%s after the upgrade: %+v, want %s, result %q, class %q", id, in, w.status, w.result, w.class)
		}
	}
	if in, err := s.GetIntentByKey(ctx, "alice", "k1"); err != nil || in.CallID != "ok" {
		t.Errorf("GetIntentByKey(k1) = %+v, %v; want ok", in, err)
	}
	for st, n := range map[store.Status]int{store.StatusUncertain: 2, store.StatusFailed: 1, store.StatusSucceeded: 1, store.StatusStarted: 0} {
		l, err := s.ListIntents(ctx, store.IntentFilter{Status: st})
		if err != nil || len(l) != n {
			t.Errorf("ListIntents(%s) = %d intents, %v; want %d", st, len(l), err, n)
		}
	}
	var cols int
	must(t, c.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'intents'
		AND column_name IN ('status', 'result', 'settled_at')`, schema).Scan(&cols))
	if cols != 0 {
		t.Errorf("the intents table still has %d settlement columns", cols)
	}
	for _, id := range []string{"odd", "run"} {
		must(t, s.ResolveIntent(ctx, id, false, "op", time.Now()))
	}
	us, err := s.BudgetUsage(ctx)
	if err != nil || len(us) != 1 || us[0].Used != 0 {
		t.Errorf("usage after both were found not executed: %+v, %v; want 0", us, err)
	}
	_, err = s.CommitIntent(ctx, &store.CommitRequest{
		Intent: store.Intent{CallID: "new", Caller: "alice", Tool: "note", ArgsDigest: "d", CreatedAt: time.Now()}})
	must(t, err)
	must(t, s.Settle(ctx, "new", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}))
	r, err := s.Prune(ctx, time.Now().Add(time.Hour))
	must(t, err)
	if r.Intents != 5 || r.Reservations != 2 {
		t.Errorf("prune after the upgrade: %+v, want all 5 intents and the 2 reservations", r)
	}
	var left int
	must(t, c.QueryRow(ctx, `SELECT (SELECT count(*) FROM intents) + (SELECT count(*) FROM settlements) + (SELECT count(*) FROM open_intents)`).Scan(&left))
	if left != 0 {
		t.Errorf("%d rows left after pruning everything", left)
	}
}

// A schema of version 9 (reservations as rows of their own) keeps them in
// the intents' rows (version 10) and comes up with the same journal and
// the same budgets: each intent reads back as it was, a started intent of
// a dead replica is recovered as uncertain, the usage is unchanged, a
// reservation still held gives its budget back when its call is found not
// executed (into its window too), one released before the upgrade (here
// by an operator's reset) gives nothing back, and everything prunes with
// its reservations counted.
func TestUpgradeFromSchema9(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	c := sqlConn(t, schema)
	if err := postgres.MigrateTo(ctx, c, schema, 9); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	w := budget.WindowAt(time.Hour, created)
	win := []any{w.PerSeconds(), w.StartSeconds()}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO incarnations (id, pid, state, lease_expires_at) VALUES ('old', 1, 'alive', now() - interval '1 hour')`, nil},
		{
			`INSERT INTO intents (call_id, caller, session, tool, definition_hash, arguments, args_digest, idempotency_key,
				approval_id, incarnation, created_at, client, protocol_version) OVERRIDING SYSTEM VALUE VALUES
			('ok', 'alice', 's1', 'note', 'h', '\x7b7d', 'd', 'k1', NULL, 'old', $1, 'cli/1.0', '2025-11-25'),
			('bad', 'alice', '', 'note', 'h', NULL, 'd', NULL, 'ap-1', 'old', $1, NULL, NULL),
			('odd', 'alice', '', 'note', 'h', NULL, 'd', NULL, NULL, 'old', $1, NULL, NULL),
			('run', 'alice', '', 'note', 'h', NULL, 'd', NULL, NULL, 'old', $1, NULL, NULL),
			('reset', 'bob', '', 'note', 'h', NULL, 'd', NULL, NULL, 'old', $1, NULL, NULL),
			('later', 'bob', '', 'note', 'h', NULL, 'd', NULL, NULL, 'old', $1, NULL, NULL)`, []any{created}},
		{`INSERT INTO settlements (seq, status, result, error_class, error_message, resolved_by, settled_at)
			SELECT seq, v.status, v.result, v.class, v.msg, v.by, $1::timestamptz + interval '1 minute'
			FROM intents JOIN (VALUES ('ok', 'succeeded', '\x7b226f6b223a747275657d'::bytea, '', '', ''),
				('bad', 'failed', NULL, 'backend', 'it broke', ''),
				('odd', 'uncertain', NULL, 'unknown_outcome', 'lost', ''),
				('reset', 'uncertain', NULL, 'unknown_outcome', 'lost', ''),
				('later', 'succeeded', '\x7b7d'::bytea, '', '', '')) AS v(call_id, status, result, class, msg, by) USING (call_id)`, []any{created}},
		{`INSERT INTO open_intents (seq, incarnation) SELECT seq, incarnation FROM intents WHERE call_id = 'run'`, nil},
		{`INSERT INTO reservations (call_id, scope, key, quota, amount, per, window_start, released) VALUES
			('ok', 'caller', 'alice', 10, 1, 0, 0, false),
			('bad', 'caller', 'alice', 10, 2, 0, 0, true),
			('odd', 'caller', 'alice', 10, 4, 0, 0, false),
			('run', 'caller', 'alice', 10, 3, 0, 0, false),
			('run', 'caller', 'alice', 5, 2, $1, $2, false),
			('reset', 'caller', 'bob', 5, 5, 0, 0, true),
			('later', 'caller', 'bob', 5, 1, 0, 0, false)`, win},
		{`INSERT INTO budget_usage (scope, key, per, window_start, quota, used) VALUES
			('caller', 'alice', 0, 0, 10, 8), ('caller', 'alice', $1, $2, 5, 2), ('caller', 'bob', 0, 0, 5, 1)`, win},
	} {
		if _, err := c.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	readJournal := func() []string {
		t.Helper()
		rows, err := c.Query(ctx, `SELECT i.seq, i.call_id, i.caller, i.session, i.arguments, i.idempotency_key, i.approval_id,
			i.created_at, i.client, i.protocol_version, s.status, s.result, s.error_class, s.error_message, s.settled_at
			FROM intents i LEFT JOIN settlements s ON s.seq = i.seq ORDER BY i.seq`)
		must(t, err)
		var out []string
		for rows.Next() {
			v, err := rows.Values()
			must(t, err)
			out = append(out, fmt.Sprint(v))
		}
		must(t, rows.Err())
		return out
	}
	journalBefore := readJournal()
	usageBefore := usageOf(t, c)

	s := openStore(t, schema, nil) // migrates, then recovers 'old'
	after := readJournal()
	for i := range journalBefore {
		want := journalBefore[i]
		if strings.Contains(want, " run ") {
			continue // recovered: compared below
		}
		if i >= len(after) || after[i] != want {
			t.Errorf("journal row %d after the upgrade:\n%v\nwant\n%v", i, after, want)
		}
	}
	if got := usageOf(t, c); got != usageBefore {
		t.Errorf("usage after the upgrade:\n%s\nwant\n%s", got, usageBefore)
	}
	want := map[string]store.Intent{
		"ok": {Status: store.StatusSucceeded, Result: []byte(`{"ok":true}`), Session: "s1", IdempotencyKey: "k1",
			ClientInfo: "cli/1.0", ProtocolVersion: "2025-11-25", Arguments: []byte(`{}`)},
		"bad":   {Status: store.StatusFailed, ErrorClass: "backend", ErrorMessage: "it broke", ApprovalID: "ap-1"},
		"odd":   {Status: store.StatusUncertain, ErrorClass: "unknown_outcome", ErrorMessage: "lost"},
		"run":   {Status: store.StatusUncertain, ErrorClass: "unknown_outcome"},
		"reset": {Status: store.StatusUncertain, ErrorClass: "unknown_outcome", ErrorMessage: "lost"},
		"later": {Status: store.StatusSucceeded, Result: []byte(`{}`)},
	}
	for id, w := range want {
		in, err := s.GetIntent(ctx, id)
		must(t, err)
		if in.Status != w.Status || string(in.Result) != string(w.Result) || in.ErrorClass != w.ErrorClass ||
			(w.ErrorMessage != "" && in.ErrorMessage != w.ErrorMessage) || in.Session != w.Session ||
			in.IdempotencyKey != w.IdempotencyKey || in.ApprovalID != w.ApprovalID || in.ClientInfo != w.ClientInfo ||
			in.ProtocolVersion != w.ProtocolVersion || string(in.Arguments) != string(w.Arguments) ||
			!in.CreatedAt.Equal(created) || in.Incarnation != "old" {
			t.Errorf("%s after the upgrade: %+v, want %+v", id, in, w)
		}
	}
	if in, err := s.GetIntentByKey(ctx, "alice", "k1"); err != nil || in.CallID != "ok" {
		t.Errorf("GetIntentByKey(k1) = %+v, %v; want ok", in, err)
	}
	for st, n := range map[store.Status]int{store.StatusUncertain: 3, store.StatusFailed: 1, store.StatusSucceeded: 2, store.StatusStarted: 0} {
		l, err := s.ListIntents(ctx, store.IntentFilter{Status: st})
		if err != nil || len(l) != n {
			t.Errorf("ListIntents(%s) = %d intents, %v; want %d", st, len(l), err, n)
		}
	}
	var tables int
	must(t, c.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'reservations'`,
		schema).Scan(&tables))
	if tables != 0 {
		t.Error("the reservations table is still there")
	}
	var run string
	must(t, c.QueryRow(ctx, `SELECT reservations::text FROM intents WHERE call_id = 'run'`).Scan(&run))
	if wantRun := fmt.Sprintf(`[["caller", "alice", 10, 3, 0, 0, 0], ["caller", "alice", 5, 2, %d, %d, 0]]`, w.PerSeconds(), w.StartSeconds()); run != wantRun {
		t.Errorf("run's reservations after the upgrade: %s, want %s", run, wantRun)
	}

	// odd and run still hold budget; reset's was released by an
	// operator before the upgrade.
	for _, id := range []string{"odd", "run", "reset"} {
		must(t, s.ResolveIntent(ctx, id, false, "op", time.Now()))
	}
	got := map[string]int64{}
	us, err := s.BudgetUsage(ctx)
	must(t, err)
	for _, u := range us {
		got[fmt.Sprintf("%s/%v", u.Key, !u.Window.IsZero())] = u.Used
	}
	if wantUsed := map[string]int64{"alice/false": 1, "alice/true": 0, "bob/false": 1}; fmt.Sprint(got) != fmt.Sprint(wantUsed) {
		t.Errorf("usage once odd, run and reset were found not executed: %v, want %v", got, wantUsed)
	}
	_, err = s.CommitIntent(ctx, &store.CommitRequest{
		Intent:       store.Intent{CallID: "new", Caller: "alice", Tool: "note", ArgsDigest: "d", CreatedAt: time.Now()},
		Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 10, Amount: 9}},
	})
	must(t, err)
	must(t, s.Settle(ctx, "new", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}))
	r, err := s.Prune(ctx, time.Now().Add(time.Hour))
	must(t, err)
	if r.Intents != 7 || r.Reservations != 8 {
		t.Errorf("prune after the upgrade: %+v, want all 7 intents and their 8 reservations", r)
	}
}

// usageOf is budget_usage as text, in key order.
func usageOf(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	rows, err := c.Query(context.Background(), `SELECT scope, key, per, window_start, quota, used FROM budget_usage ORDER BY 1, 2, 3, 4`)
	must(t, err)
	var b strings.Builder
	for rows.Next() {
		v, err := rows.Values()
		must(t, err)
		fmt.Fprintln(&b, v...)
	}
	must(t, rows.Err())
	return b.String()
}
