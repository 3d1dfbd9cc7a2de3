package resuri_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/internal/resuri"
)

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// The review's forms: a glob rt://files/* granted these.
		{"rt://files/..", "rt://files/"},
		{"rt://files/../secret", "rt://files/secret"},
		{"rt://files/%2e%2e", "rt://files/"},
		{"rt://files/%2E%2E/secret", "rt://files/secret"},
		{"rt://files/.%2e/.%2E/x", "rt://files/x"},
		{"file:///srv/files/../etc/passwd", "file:///srv/etc/passwd"},
		{"file:///srv/files/./a/./b/../c", "file:///srv/files/a/c"},
		{"file:///srv/files/a/../../../../x", "file:///x"},
		{"rt:files/../secret", "rt:/secret"},
		{"rt:/..//x", "rt:/.//x"},
		// Case and percent-encoding.
		{"RT://Files.Example/%7euser/%41%62", "rt://files.example/~user/Ab"},
		{"rt://files/%e2%82%ac", "rt://files/%E2%82%AC"},
		{"rt://u%7eser@HOST:80/p", "rt://u~ser@host:80/p"},
		{"rt://files/a?q=%2f..%2f&x=../y#%2e%2e/f", "rt://files/a?q=%2F..%2F&x=../y#../f"},
		{"rt://files/a..b/.c/c.", "rt://files/a..b/.c/c."},
		// Unchanged.
		{"rt://files/a/b.txt", "rt://files/a/b.txt"},
		{"urn:ietf:rfc:3986", "urn:ietf:rfc:3986"},
		{"rt://files/dir/", "rt://files/dir/"},
		{"rt://files/my file.txt", "rt://files/my file.txt"},
		{"rt://files/é", "rt://files/é"},
		// Encoded separators that make no dot segment are names.
		{"rt://repo/owner%2frepo/file", "rt://repo/owner%2Frepo/file"},
		{"rt://files/a%5cb", "rt://files/a%5Cb"},
		{"rt://files/a%2F..b", "rt://files/a%2F..b"},
		// RFC 3986 5.4's normal examples, as resolved paths.
		{"http://a/b/c/./../../g", "http://a/g"},
		{"http://a/b/c/g;x=1/./y", "http://a/b/c/g;x=1/y"},
		{"http://a/b/c/g;x=1/../y", "http://a/b/c/y"},
		{"http://a/b/c/d;p/../../../../g", "http://a/g"},
	} {
		got, err := resuri.Normalize(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
		if again, err := resuri.Normalize(got); err != nil || again != got {
			t.Errorf("%s: normalising %s again gave %s, %v", c.in, got, again, err)
		}
	}
}

func TestNormalizeRefuses(t *testing.T) {
	for _, in := range []string{
		"", "files/x", ":x", "1rt://x", "rt://files/%2e%2e%2fsecret", "rt://files/..%2Fsecret",
		"rt://files/x%2F..", "rt://files/x%5C..%5Cy", "rt://files/%2F.%2F", "rt://files/%2e%2e%5csecret",
		"rt://files/a%00", "rt://files/..\\secret",
		"rt://files/%", "rt://files/%4", "rt://files/%zz", "rt://files/%e", "rt://fi%g1les/",
		"rt://files/a\nb", "rt://files/\x00", "rt://files/\x7f", "rt://files/\u0085", "rt://files/\xff",
	} {
		if got, err := resuri.Normalize(in); err == nil || !errors.Is(err, resuri.ErrInvalid) {
			t.Errorf("%q: got %q, %v; want a refusal", in, got, err)
		}
	}
}

// FuzzNormalize: no input panics; a normal form is a fixed point, holds no
// dot segment in its path and none of the refused encodings.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"rt://files/..", "rt://files/%2e%2e%2fsecret", "file:///srv/files/../etc/passwd",
		"RT://Files/%7euser", "rt:/..//x", "rt:a/..", "http://a/b/c/./../../g?q#f", "urn:x:y",
		"rt://u@h:1/%41/./%2E./b", "a:%2e%2E/.%2e//",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := resuri.Normalize(in)
		if err != nil {
			if !errors.Is(err, resuri.ErrInvalid) {
				t.Fatalf("%q: an error not wrapping ErrInvalid: %v", in, err)
			}
			return
		}
		again, err := resuri.Normalize(out)
		if err != nil || again != out {
			t.Fatalf("%q: normal form %q is not stable: %q, %v", in, out, again, err)
		}
		path := out[strings.IndexByte(out, ':')+1:]
		if strings.HasPrefix(path, "//") {
			path = path[2:]
			if i := strings.IndexByte(path, '/'); i >= 0 {
				path = path[i:]
			} else {
				path = ""
			}
		}
		if i := strings.IndexAny(path, "?#"); i >= 0 {
			path = path[:i]
		}
		for _, seg := range strings.Split(path, "/") {
			if seg == ".." || (seg == "." && !strings.HasPrefix(path, "/./")) {
				t.Fatalf("%q: normal form %q keeps a dot segment in %q", in, out, path)
			}
		}
		for _, bad := range []string{"%00", "%2E", "%2e", "%2f", "%5c", "\\"} {
			if strings.Contains(path, bad) {
				t.Fatalf("%q: normal form %q has %s in its path", in, out, bad)
			}
		}
		// Decoded as a careless server would, the path still has no dot
		// segment.
		decoded, err := url.PathUnescape(path)
		if err == nil {
			for _, seg := range strings.FieldsFunc(decoded, func(r rune) bool { return r == '/' || r == '\\' }) {
				if (seg == ".." || seg == ".") && !strings.HasPrefix(path, "/./") {
					t.Fatalf("%q: normal form %q decodes to the dot segment %q", in, out, seg)
				}
			}
		}
	})
}
