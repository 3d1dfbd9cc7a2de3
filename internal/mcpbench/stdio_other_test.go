//go:build !unix

package mcpbench

import (
	"io"
	"os"
	"testing"
)

// stdioPipes returns the pipes between the benchmark's client and the
// gateway's server (see stdio_unix_test.go); here both are os.Pipe's.
func stdioPipes(b testing.TB) (inR io.ReadCloser, inW io.WriteCloser, outR io.ReadCloser, outW io.WriteCloser) {
	b.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err = os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	return inR, inW, outR, outW
}
