package sqlite

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// TestStoreIsPrivate: a new store folder is 0700 and its database, -wal
// and -shm files 0600 whatever the umask; a folder and a database left
// world-readable before (0755, 0644) are tightened when the store opens
// (issue 12, finding 9: backplane.db was 0644).
func TestStoreIsPrivate(t *testing.T) {
	for _, pre := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "state")
		if pre {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, DBFile), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, DBFile), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s, err := Open(dir, &Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		// A write, so that the -wal and -shm files exist.
		now := time.Now()
		if _, err := s.CommitIntent(context.Background(), &store.CommitRequest{Intent: store.Intent{
			CallID: "call_perm", Caller: "a", Tool: "t", DefinitionHash: "h", Arguments: []byte(`{}`), ArgsDigest: "d", CreatedAt: now,
		}}); err != nil {
			t.Fatal(err)
		}
		check := func(p string, want fs.FileMode) {
			t.Helper()
			fi, err := os.Stat(p)
			if err != nil {
				t.Errorf("pre-existing %v: %v", pre, err)
				return
			}
			if got := fi.Mode().Perm(); got&^want != 0 {
				t.Errorf("pre-existing %v: %s is %v, want at most %v", pre, filepath.Base(p), got, want)
			}
		}
		check(dir, 0o700)
		check(filepath.Join(dir, "incarnations"), 0o700)
		for _, f := range []string{DBFile, DBFile + "-wal", DBFile + "-shm"} {
			check(filepath.Join(dir, f), 0o600)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
