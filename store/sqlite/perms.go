package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// The journal holds every call's arguments and results: the store folder
// is the owner's alone (0700) and so are its files (0600). A folder or
// file made looser before (an older version, a umask of 022, a copy) is
// tightened when the store opens, with a warning, rather than refused:
// the fix is the same either way, and a refusal would only make the
// operator type the chmod. The database file is created here, before
// SQLite would create it with 0644; SQLite gives its -wal and -shm files
// the database file's permissions.

// Modes of the store's folder and files.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// tightenPermissions makes dir, its incarnations folder, the database and
// its -wal and -shm files the owner's alone, creating the database empty
// when it does not exist yet.
func tightenPermissions(dir string, log *slog.Logger) error {
	for _, d := range []string{dir, filepath.Join(dir, "incarnations")} {
		if err := tighten(d, DirMode, log); err != nil {
			return err
		}
	}
	db := filepath.Join(dir, DBFile)
	f, err := os.OpenFile(db, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if err := tighten(p, FileMode, log); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// tighten removes from p's permissions what mode does not grant.
func tighten(p string, mode fs.FileMode, log *slog.Logger) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	if perm&^mode == 0 {
		return nil
	}
	if err := os.Chmod(p, perm&mode); err != nil {
		return fmt.Errorf("%s is readable by others (%v) and cannot be made private: %w", p, perm, err)
	}
	log.Warn("store file was readable by others: permissions tightened", "path", p, "was", perm.String(), "now", (perm & mode).String())
	return nil
}
