package assemble

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// config keeps its own copies of a few names so that it imports no
// backend and no gateway; they must stay what the packages they name say.
func TestConfigAgreesWithThePackagesItNames(t *testing.T) {
	if config.DefaultApprovalExpire != gateway.DefaultApprovalExpiry ||
		config.DefaultMaxResultBytes != gateway.DefaultMaxResultBytes ||
		config.DefaultTimeout != gateway.DefaultTimeout {
		t.Errorf("config's defaults %v %v %v differ from the gateway's %v %v %v",
			config.DefaultApprovalExpire, config.DefaultMaxResultBytes, config.DefaultTimeout,
			gateway.DefaultApprovalExpiry, gateway.DefaultMaxResultBytes, gateway.DefaultTimeout)
	}
	if config.ValidatorSubset != upstream.ValidatorSubset || config.ValidatorDraft2020 != upstream.ValidatorDraft2020 {
		t.Errorf("config's validators %q %q, backend/upstream's %q %q",
			config.ValidatorSubset, config.ValidatorDraft2020, upstream.ValidatorSubset, upstream.ValidatorDraft2020)
	}
	var names []string
	for _, s := range schemas.All() {
		names = append(names, s.Name)
	}
	if !slices.Equal(tool.BuiltinNames(), names) {
		t.Errorf("tool.BuiltinNames() = %v, the built-in schemas are %v", tool.BuiltinNames(), names)
	}
}

func writeConfig(t *testing.T, src string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bp.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPostgresOptionsComeFromTheSection(t *testing.T) {
	c := writeConfig(t, "store: postgres://u@127.0.0.1/db\npostgres: {lease_ttl: 20s, renew_every: 2s, max_conns: 4}\n")
	log := slog.New(slog.DiscardHandler)
	o := postgresOptions(c.Postgres, log)
	if o.LeaseTTL.String() != "20s" || o.RenewEvery.String() != "2s" || o.MaxConns != 4 || o.Schema != "" || o.Logger != log {
		t.Errorf("store options %+v", o)
	}
}

// The store's kind is the one config parsed, not a guess from the text: a
// folder whose name holds "://" is a folder, and the audit log goes there
// (a guess by strings.Contains("://") sent it to stderr).
func TestStoreKindDecidesTheStoreAndTheAuditLog(t *testing.T) {
	c := writeConfig(t, "store: ./odd://name\nbuiltin: {enable: []}\n")
	if c.StoreKind != config.StoreSQLite {
		t.Fatalf("StoreKind = %q", c.StoreKind)
	}
	var stderr bytes.Buffer
	rt, err := Open(context.Background(), c, &Options{Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.Store.(*sqlite.Store); !ok {
		t.Errorf("store %T, want *sqlite.Store", rt.Store)
	}
	rt.Audit.Info("probe", "marker", "m-1")
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(c.Store, AuditLogName))
	if err != nil || !strings.Contains(string(got), "m-1") {
		t.Errorf("the audit log in the store folder: %q, %v", got, err)
	}
	if strings.Contains(stderr.String(), "m-1") {
		t.Error("the audit event went to stderr")
	}
}

// One opener, in order: Logger, then AuditLog ("-" is Stderr), then
// log.file, then the store folder.
func TestAuditLogChoice(t *testing.T) {
	c := writeConfig(t, "builtin: {enable: []}\nlog: {file: configured.log}\n")
	open := func(o *Options) {
		t.Helper()
		rt, err := Open(context.Background(), c, o)
		if err != nil {
			t.Fatal(err)
		}
		rt.Audit.Info("probe", "marker", "m-2")
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
	}
	holds := func(path string) bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), "m-2")
	}
	var given bytes.Buffer
	open(&Options{Logger: slog.New(slog.NewJSONHandler(&given, nil))})
	if !strings.Contains(given.String(), "m-2") || holds(c.Log.File) {
		t.Errorf("Options.Logger: it holds %q; the configured file holds it: %v", given.String(), holds(c.Log.File))
	}
	var stderr bytes.Buffer
	open(&Options{AuditLog: "-", Stderr: &stderr})
	if !strings.Contains(stderr.String(), "m-2") || holds(c.Log.File) {
		t.Errorf(`AuditLog "-": stderr holds %q; the configured file holds it: %v`, stderr.String(), holds(c.Log.File))
	}
	other := filepath.Join(t.TempDir(), "other.log")
	open(&Options{AuditLog: other})
	if !holds(other) || holds(c.Log.File) {
		t.Errorf("AuditLog %s: it holds the event %v, the configured file %v", other, holds(other), holds(c.Log.File))
	}
	open(nil)
	if !holds(c.Log.File) || holds(filepath.Join(c.Store, AuditLogName)) {
		t.Errorf("log.file: it holds the event %v; the store folder's log %v", holds(c.Log.File), holds(filepath.Join(c.Store, AuditLogName)))
	}
}

// A hand-built Config naming a store kind that does not exist is refused
// before anything is created.
func TestOpenRefusesAnUnknownStoreKind(t *testing.T) {
	dir := t.TempDir()
	c := &config.Config{Path: "hand.yaml", Dir: dir, Store: filepath.Join(dir, "state"), StoreKind: "mysql",
		Log: config.Log{Level: "info", File: filepath.Join(dir, "audit.log")}}
	_, err := Open(context.Background(), c, nil)
	var ce *config.Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `store kind "mysql"`) {
		t.Fatalf("Open: %v, want a configuration error naming the kind", err)
	}
	if _, err := os.Stat(c.Store); !os.IsNotExist(err) {
		t.Errorf("the store folder was created (stat: %v)", err)
	}
}
