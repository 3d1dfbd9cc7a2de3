package builtin

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Hiding by identity. A path check, even by where the kernel says a
// descriptor is, sees one name of a file; a hard link gives the same file
// another name, inside the workspace (making one takes bash, or any
// process of the user). And on a case-insensitive volume (macOS's default,
// Windows) "BACKPLANE.YAML" opens backplane.yaml under a name no check by
// name matches. So a file is also compared, by (device, inode), with the
// files of the hidden paths:
//
//   - on Linux, where the name check is by the descriptor's real path, a
//     regular file with more than one link;
//   - elsewhere, every file and folder opened.
//
// And where names are case-insensitive (foldCase), the name checks fold
// case too, so that a file about to be created (write) cannot replace a
// hidden one under another case.

// foldCase makes name checks case-insensitive: on the platforms whose usual
// volumes ignore case. (A case-sensitive volume there is refused by names
// that merely differ in case: harmless.)
var foldCase = runtime.GOOS == "darwin" || runtime.GOOS == "windows"

// checkEveryID compares every opened file's identity with the hidden
// files', where the kernel cannot say where a descriptor is.
var checkEveryID = runtime.GOOS != "linux"

// fileKey identifies a file on its volume.
type fileKey struct{ dev, ino uint64 }

// Bounds of the scan of the hidden folders for their files' identities:
// the store folder holds a few files (database, its -wal and -shm, the
// audit log); what lies deeper or beyond the cap is still hidden by name.
const (
	hiddenScanDepth   = 3
	hiddenScanEntries = 4096
	// hiddenIDsTTL is how long a scan is reused where every open is
	// checked (checkEveryID); on Linux a scan is made only for a file
	// with several links, and never reused.
	hiddenIDsTTL = time.Second
)

// hiddenIDs returns the identities of the hidden paths and, for folders,
// of what lies in them.
func (s *Set) hiddenIDs() map[fileKey]bool {
	if checkEveryID {
		s.idsMu.Lock()
		defer s.idsMu.Unlock()
		if s.ids != nil && time.Since(s.idsAt) < hiddenIDsTTL {
			return s.ids
		}
	}
	ids := map[fileKey]bool{}
	n := 0
	var scan func(p string, depth int)
	scan = func(p string, depth int) {
		if n >= hiddenScanEntries {
			return
		}
		n++
		fi, err := os.Stat(p)
		if err != nil {
			return
		}
		if k, _, ok := fileID(fi); ok {
			ids[k] = true
		}
		if !fi.IsDir() || depth >= hiddenScanDepth {
			return
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return
		}
		for _, e := range entries {
			scan(filepath.Join(p, e.Name()), depth+1)
		}
	}
	for _, h := range s.hidden {
		scan(h, 0)
	}
	if checkEveryID {
		s.ids, s.idsAt = ids, time.Now()
	}
	return ids
}

// sameAsHidden reports whether f is one of the hidden files or folders
// under another name (a hard link, another case): see above.
func (s *Set) sameAsHidden(f *os.File) bool {
	if len(s.hidden) == 0 {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	return s.sameIDAsHidden(fi)
}

func (s *Set) sameIDAsHidden(fi fs.FileInfo) bool {
	k, nlink, ok := fileID(fi)
	if !ok {
		return false
	}
	if !checkEveryID && !(fi.Mode().IsRegular() && nlink > 1) {
		return false
	}
	return s.hiddenIDs()[k]
}

// foldName is a path as the name checks compare it.
func foldName(p string) string {
	if foldCase {
		return strings.ToLower(p)
	}
	return p
}
