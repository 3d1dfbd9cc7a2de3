//go:build !linux

package builtin

import "os"

// realPath has no portable way to ask where a descriptor is: the hidden
// paths are then checked by name only (see locate).
func realPath(f *os.File) (string, bool) { return "", false }

// locateRoot returns lex: the folder's path by name.
func locateRoot(r *os.Root, lex string) (string, error) { return lex, nil }

// resolveOpenFlags open what a resolution found to learn its identity;
// where that fails (no read permission) the walk's own look is used.
const resolveOpenFlags = openFlags
