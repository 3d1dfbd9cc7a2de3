package schematool

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
)

func TestReadLine(t *testing.T) {
	const max = 8
	// A small buffer forces lines across several ReadSlice chunks.
	r := bufio.NewReaderSize(strings.NewReader("12345678\n123456789\nabc\r\n\nlast"), 16)
	want := []struct {
		line    string
		tooLong bool
	}{
		{"12345678", false}, // exactly max
		{"", true},          // max+1
		{"abc\r", false},
		{"", false},
		{"last", false}, // no final newline
	}
	var buf []byte
	for i, w := range want {
		line, tooLong, err := readLine(r, buf, max)
		if err != nil || string(line) != w.line || tooLong != w.tooLong {
			t.Errorf("line %d: %q tooLong=%v err=%v, want %q tooLong=%v", i, line, tooLong, err, w.line, w.tooLong)
		}
		buf = line[:0]
	}
	if _, _, err := readLine(r, buf, max); err != io.EOF {
		t.Errorf("after the last line: err %v, want io.EOF", err)
	}

	// A long line spanning many buffers is consumed to its end.
	r = bufio.NewReaderSize(strings.NewReader(strings.Repeat("y", 100)+"\nok\n"), 16)
	if _, tooLong, err := readLine(r, nil, max); !tooLong || err != nil {
		t.Errorf("long line: tooLong=%v err=%v", tooLong, err)
	}
	if line, _, _ := readLine(r, nil, max); string(line) != "ok" {
		t.Errorf("line after a long one: %q", line)
	}
}

// countingCompile is inputschema.Compile counting its calls.
func countingCompile(n *int) func([]byte) (*inputschema.Schema, error) {
	return func(data []byte) (*inputschema.Schema, error) {
		*n++
		return inputschema.Compile(data, nil)
	}
}

func TestSchemaCacheKeysAndBounds(t *testing.T) {
	compiles := 0
	c := NewCache(&Options{CacheEntries: 2, CacheBytes: 1 << 20}, countingCompile(&compiles))
	a, b := []byte(`{"type":"object"}`), []byte(`{"type": "object"}`) // same meaning, other bytes
	d := []byte(`{"type":"object","description":"d"}`)

	sa, err := c.get(a)
	if err != nil || sa == nil {
		t.Fatalf("compile: %v", err)
	}
	if again, _ := c.get(a); again != sa {
		t.Error("a second get did not return the cached schema")
	}
	c.get(b)
	if compiles != 2 {
		t.Errorf("%d compiles, want 2: the key is the exact bytes", compiles)
	}
	c.get(a) // a becomes the most recently used
	c.get(d) // evicts b, the least recently used
	if c.Len() != 2 {
		t.Errorf("cache holds %d entries, bound 2", c.Len())
	}
	before := compiles
	c.get(a)
	if compiles != before {
		t.Error("a was evicted although b was the least recently used")
	}
	c.get(b)
	if compiles != before+1 {
		t.Error("b was not evicted")
	}

	// The byte bound: texts larger than the bound are compiled, never kept.
	compiles = 0
	small := NewCache(&Options{CacheEntries: 100, CacheBytes: 20}, countingCompile(&compiles))
	small.get(d)
	small.get(d)
	if compiles != 2 || small.Len() != 0 {
		t.Errorf("over-bound text: %d compiles, %d entries; want 2, 0", compiles, small.Len())
	}
	small.get(a) // 17 bytes, fits
	small.get(a)
	if compiles != 3 || small.Len() != 1 {
		t.Errorf("fitting text: %d compiles, %d entries; want 3, 1", compiles, small.Len())
	}
}

// failingWriter fails every write, as a closed stdout does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("closed") }

func TestBatchReportsWriteFailure(t *testing.T) {
	in := strings.NewReader(`{"schema":{"type":"object"},"arguments":{}}` + "\n")
	if err := RunBatch(in, failingWriter{}, nil); err == nil {
		t.Error("a failing stdout went unreported")
	} else if !errors.Is(err, ErrIO) {
		t.Errorf("write failure %v does not wrap ErrIO", err)
	}
}
