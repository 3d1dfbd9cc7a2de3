package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const storeSecret = "s3cret-pw"

// loadIn writes yaml as dir/backplane.yaml and loads it.
func loadIn(t *testing.T, dir, yaml string) (*Config, error) {
	t.Helper()
	path := filepath.Join(dir, "backplane.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return Load(path)
}

// The store URL, password included, comes from the environment or a file;
// Config says where it came from, so that what prints the store names that.
func TestStoreFromEnvAndFile(t *testing.T) {
	url := "postgres://backplane:" + storeSecret + "@127.0.0.1:5432/backplane?sslmode=disable"
	t.Setenv("BP_TEST_STORE_URL", url)
	c, err := loadIn(t, t.TempDir(), "store_env: BP_TEST_STORE_URL\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != url || c.StoreKind != StorePostgres || c.StoreSource != "store_env BP_TEST_STORE_URL" {
		t.Errorf("store_env: store %q kind %q source %q", c.Store, c.StoreKind, c.StoreSource)
	}

	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o600, 0o400, 0o640} {
		if err := os.WriteFile(filepath.Join(dir, "store.url"), []byte("  "+url+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, "store.url"), mode); err != nil {
			t.Fatal(err)
		}
		c, err = loadIn(t, dir, "store_file: store.url\npostgres: {max_conns: 4}\n")
		if err != nil {
			t.Fatalf("mode %04o: %v", mode, err)
		}
		if c.Store != url || c.StoreKind != StorePostgres || c.StoreSource != "store_file store.url" || c.Postgres.MaxConns != 4 {
			t.Errorf("store_file (mode %04o): store %q kind %q source %q", mode, c.Store, c.StoreKind, c.StoreSource)
		}
	}

	// A folder works too (resolved against the configuration's folder).
	t.Setenv("BP_TEST_STORE_DIR", "state")
	if c, err = loadIn(t, dir, "store_env: BP_TEST_STORE_DIR\n"); err != nil || c.Store != filepath.Join(dir, "state") || c.StoreKind != StoreSQLite {
		t.Errorf("a folder from store_env: %+v %v", c, err)
	}
	// store: in the file is as before.
	if c, err = loadIn(t, dir, "store: state\n"); err != nil || c.StoreSource != "" {
		t.Errorf("store: %v, source %q", err, c.StoreSource)
	}
}

// Every refusal is clear and never holds the URL's password.
func TestStoreSourcesRefused(t *testing.T) {
	dir := t.TempDir()
	bad := "ftp://u:" + storeSecret + "@h/x"
	t.Setenv("BP_TEST_BAD_STORE", bad)
	t.Setenv("BP_TEST_EMPTY_STORE", " ")
	for name, mode := range map[string]os.FileMode{"open.url": 0o644, "groupw.url": 0o620, "ok.url": 0o600} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("postgres://u:"+storeSecret+"@h/db\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, name), mode)
	}
	os.WriteFile(filepath.Join(dir, "bad.url"), []byte(bad), 0o600)
	os.WriteFile(filepath.Join(dir, "empty.url"), []byte("\n"), 0o600)
	for name, c := range map[string]struct{ yaml, want string }{
		"store and store_env":  {"store: x\nstore_env: BP_TEST_BAD_STORE\n", "give one of store, store_env and store_file (store is given too)"},
		"store_env and file":   {"store_env: BP_TEST_STORE_FOLDER\nstore_file: ok.url\n", "give one of store, store_env and store_file"},
		"unset":                {"store_env: BP_TEST_SURELY_UNSET\n", "store_env BP_TEST_SURELY_UNSET is not set or empty"},
		"blank":                {"store_env: BP_TEST_EMPTY_STORE\n", "not set or empty"},
		"not a name":           {"store_env: \"A-B\"\n", "not an environment variable name"},
		"other scheme (env)":   {"store_env: BP_TEST_BAD_STORE\n", `store_env BP_TEST_BAD_STORE "ftp://..."`},
		"other scheme (file)":  {"store_file: bad.url\n", `store_file bad.url "ftp://..."`},
		"missing file":         {"store_file: nope.url\n", "no such file"},
		"empty file":           {"store_file: empty.url\n", "store_file empty.url is empty"},
		"readable by others":   {"store_file: open.url\n", "mode 0644, which lets others read it or its group change it: chmod 600"},
		"writable by group":    {"store_file: groupw.url\n", "mode 0620"},
		"a folder":             {"store_file: .\n", "not a regular file"},
		"store_file no name":   {"store_file: \"\"\n", "store_file needs a file name"},
		"postgres with folder": {"store_env: BP_TEST_STORE_FOLDER\npostgres: {max_conns: 4}\n", "apply only to a postgres:// store"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("BP_TEST_STORE_FOLDER", "state")
			_, err := loadIn(t, dir, c.yaml)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), storeSecret) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}
