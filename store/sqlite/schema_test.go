package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// TestSettlementStatusChecked checks schema version 14: settlements still
// refuse a status outside the five, and the rewrite of the table keeps its
// rows (the migration is run again on a database set back to version 13).
func TestSettlementStatusChecked(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	ctx := context.Background()
	for i, st := range []store.Status{store.StatusSucceeded, store.StatusFailed} {
		id := fmt.Sprint("s", i)
		if _, err := s.CommitIntent(ctx, intentReq(id, "alice")); err != nil {
			t.Fatal(err)
		}
		if err := s.Settle(ctx, id, store.Settlement{Status: st, ErrorClass: "x", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var seq int64
	if err := s.rdb.QueryRowContext(ctx, `SELECT seq FROM intents WHERE call_id = 's0'`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`UPDATE settlements SET status = 'bogus' WHERE seq = ?`, seq)
		return err
	}); err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Errorf("a settlement set to status bogus: %v, want a CHECK constraint error", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA user_version = 13`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	again := openDir(t, dir)
	for i, want := range []store.Status{store.StatusSucceeded, store.StatusFailed} {
		in, err := again.GetIntent(ctx, fmt.Sprint("s", i))
		if err != nil || in.Status != want || in.ErrorClass != "x" {
			t.Errorf("s%d after the migration: %+v, %v; want %s", i, in, err, want)
		}
	}
	list, err := again.ListIntents(ctx, store.IntentFilter{Status: store.StatusFailed})
	if err != nil || len(list) != 1 {
		t.Errorf("failed intents listed through settlements_rare: %v, %v", list, err)
	}
}
