//go:build !linux

package sqlite

import "os"

// aioSync is Linux's (walsync_linux.go); elsewhere the WAL is synced with
// fdatasync on the writer's goroutine.
type aioSync struct{}

func newAIOSync() *aioSync                   { return nil }
func (*aioSync) sync(*os.File, string) error { panic("unreachable") }
func (*aioSync) close()                      {}
