package auditlog_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/internal/auditlog"
)

// lines reads every line of the audit files in dir (rotated ones first, by
// name, which sorts by their timestamp) and checks each is a whole JSON
// object.
func lines(t *testing.T, dir string) []map[string]any {
	t.Helper()
	names := files(t, dir)
	var out []map[string]any
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: a line is not a whole JSON record: %v: %.200s", n, err, sc.Text())
			}
			out = append(out, m)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// files lists the audit files in dir: the rotated ones by name, then the
// current audit.log.
func files(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rotated []string
	current := false
	for _, e := range ents {
		switch {
		case e.Name() == "audit.log":
			current = true
		case strings.HasPrefix(e.Name(), "audit-") && strings.HasSuffix(e.Name(), ".log"):
			rotated = append(rotated, e.Name())
		default:
			t.Errorf("unexpected file %s beside the audit log", e.Name())
		}
	}
	slices.Sort(rotated)
	if current {
		rotated = append(rotated, "audit.log")
	}
	return rotated
}

// Close writes what is buffered: every record, in order, whole, through a
// slog JSON handler as the gateway uses it.
func TestCloseWritesEverything(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	w, err := auditlog.Open(path, &auditlog.Options{FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(w, nil))
	const n = 5000
	for i := range n {
		log.Info("call", "n", i, "text", "with \"quotes\" and\nnewlines")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := lines(t, dir)
	if len(got) != n {
		t.Fatalf("%d records, want %d", len(got), n)
	}
	for i, m := range got {
		if m["n"] != float64(i) {
			t.Fatalf("record %d is %v", i, m["n"])
		}
	}
	if _, err := w.Write([]byte("{}\n")); !errors.Is(err, auditlog.ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}

// A record written and not flushed reaches the file by the interval,
// without Close.
func TestFlushesOnInterval(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	w, err := auditlog.Open(path, &auditlog.Options{FlushEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte(`{"msg":"one"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) == `{"msg":"one"}`+"\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record never reached the file without Close: %q", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Rotation for real on disk: past MaxSize the file is rotated, no record is
// lost or split among the files kept, and only MaxFiles rotated files stay.
func TestRotationKeepsCount(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	const keep = 2
	w, err := auditlog.Open(path, &auditlog.Options{MaxSize: 1, MaxFiles: keep, FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// About 5.5 MiB in records of ~1 KiB: five rotations at the 1 MiB
	// floor, so the count must have removed some.
	pad := strings.Repeat("x", 1000)
	const n = 5600
	for i := range n {
		if _, err := fmt.Fprintf(w, `{"n":%d,"pad":%q}`+"\n", i, pad); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Old files are removed in the background after a rotation.
	deadline := time.Now().Add(10 * time.Second)
	for len(files(t, dir)) > keep+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	names := files(t, dir)
	if len(names) != keep+1 {
		t.Fatalf("files %v, want %d rotated and audit.log", names, keep)
	}
	var total int64
	for _, nm := range names {
		fi, err := os.Stat(filepath.Join(dir, nm))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > auditlog.MinMaxSize {
			t.Errorf("%s is %d bytes, over the 1 MiB limit", nm, fi.Size())
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", nm, fi.Mode().Perm())
		}
		total += fi.Size()
	}
	// What is kept is the newest records, consecutive up to the last one.
	got := lines(t, dir)
	if len(got) == 0 || got[len(got)-1]["n"] != float64(n-1) {
		t.Fatalf("the last record kept is not the last written")
	}
	first := int(got[0]["n"].(float64))
	if first == 0 {
		t.Errorf("nothing was removed: %d bytes kept", total)
	}
	for i, m := range got {
		if m["n"] != float64(first+i) {
			t.Fatalf("record %d is %v, want %d: a record was lost between files", i, m["n"], first+i)
		}
	}
}

// Two writers on one file, as serve and a CLI command: every record of
// both arrives whole.
func TestTwoWritersAppend(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	var wg sync.WaitGroup
	const n = 2000
	for wr := range 2 {
		w, err := auditlog.Open(path, &auditlog.Options{FlushEvery: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := range n {
				fmt.Fprintf(w, `{"w":%d,"n":%d}`+"\n", wr, i)
			}
			if err := w.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := lines(t, dir)
	next := [2]int{}
	for _, m := range got {
		wr, i := int(m["w"].(float64)), int(m["n"].(float64))
		if i != next[wr] {
			t.Fatalf("writer %d: record %d, want %d", wr, i, next[wr])
		}
		next[wr]++
	}
	if next != [2]int{n, n} {
		t.Errorf("records %v, want %d of each", next, n)
	}
}

// An existing file readable by others is made the owner's alone; a path
// that cannot be a file fails Open.
func TestOpenChecks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := auditlog.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, []byte("{}\n")) {
		t.Errorf("the existing records changed: %q", b)
	}
	if _, err := auditlog.Open(dir, nil); err == nil {
		t.Error("Open of a folder succeeded")
	}
	if _, err := auditlog.Open(filepath.Join(dir, "missing", "audit.log"), nil); err == nil {
		t.Error("Open in a missing folder succeeded")
	}
}

// A path that is not a regular file is written, not rotated: /dev/null
// (`--audit-log /dev/null` discards the audit) and a fifo, whose reader
// gets every record.
func TestNotARegularFile(t *testing.T) {
	w, err := auditlog.Open(os.DevNull, &auditlog.Options{MaxSize: auditlog.MinMaxSize})
	if err != nil {
		t.Fatalf("open %s: %v", os.DevNull, err)
	}
	if _, err := w.Write([]byte("{\"msg\":\"x\"}\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close %s: %v", os.DevNull, err)
	}

	fifo := filepath.Join(t.TempDir(), "audit.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// hold keeps a writer on the fifo until the end, so that opening the
	// reader does not block and the reader sees EOF only once hold closes.
	hold, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	w, err = auditlog.Open(fifo, nil)
	if err != nil {
		t.Fatalf("open a fifo: %v", err)
	}
	for i := range 3 {
		fmt.Fprintf(w, "{\"n\":%d}\n", i)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	hold.Close()
	if want := "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n"; <-got != want {
		t.Errorf("the fifo's reader got something else, want %q", want)
	}
}
