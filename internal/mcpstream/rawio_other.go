//go:build !linux

package mcpstream

import "io"

// rawReader returns r: raw system calls are Linux's alone (rawio_linux.go).
func rawReader(r io.Reader) io.Reader { return r }

// rawWriter returns w (see rawReader).
func rawWriter(w io.Writer) io.Writer { return w }
