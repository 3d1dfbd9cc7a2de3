package sqlite

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAIOSync syncs a regular file through the asynchronous fdatasync (the
// kernel takes it: no fallback), and a pipe, which the kernel refuses at
// submission: the sync falls back to fdatasync, which reports the error.
func TestAIOSync(t *testing.T) {
	a := newAIOSync()
	if a == nil {
		t.Skip("the kernel refuses io_setup or eventfd here: the WAL is synced with fdatasync")
	}
	defer a.close()
	f, err := os.Create(filepath.Join(t.TempDir(), "wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 3 {
		if _, err := f.Write([]byte("frame")); err != nil {
			t.Fatal(err)
		}
		if err := a.sync(f, f.Name()); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if a.off {
		t.Fatal("the kernel refused the asynchronous sync of a regular file")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := a.sync(w, "pipe"); err == nil {
		t.Fatal("a pipe's sync succeeded")
	}
	if !a.off {
		t.Fatal("after a refused submission the sync is still asynchronous")
	}
}
