//go:build unix

package builtin

import (
	"io/fs"
	"syscall"
)

// fileID returns fi's device and inode, and its number of links.
func fileID(fi fs.FileInfo) (fileKey, uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, 0, false
	}
	return fileKey{uint64(st.Dev), uint64(st.Ino)}, uint64(st.Nlink), true
}
