package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const pgStore = "store: postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=bp_x\n"

func TestPostgresSectionValues(t *testing.T) {
	for name, src := range map[string]string{
		"store first":    pgStore + "postgres: {lease_ttl: 20s, renew_every: 2s, max_conns: 4}\n",
		"postgres first": "postgres:\n  max_conns: 4\n  renew_every: 2s\n  lease_ttl: 20s\n" + pgStore,
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(src), "backplane.yaml")
			if err != nil {
				t.Fatal(err)
			}
			got := c.Postgres
			if got.LeaseTTL != 20*time.Second || got.RenewEvery != 2*time.Second || got.MaxConns != 4 {
				t.Errorf("Postgres = %+v, want lease 20s, renew 2s, 4 connections", got)
			}
			wantLine := 2
			if name == "postgres first" {
				wantLine = 1
			}
			if got.Line != wantLine {
				t.Errorf("Line = %d, want %d", got.Line, wantLine)
			}
			if c.StoreKind != StorePostgres {
				t.Errorf("StoreKind = %q, want %q", c.StoreKind, StorePostgres)
			}
		})
	}
}

func TestPostgresSectionDefaults(t *testing.T) {
	for _, tc := range []struct {
		src          string
		ttl, renew   time.Duration
		maxConns     int32
		sectionGiven bool
	}{
		{pgStore, 15 * time.Second, 5 * time.Second, 0, false},
		{pgStore + "postgres: {}\n", 15 * time.Second, 5 * time.Second, 0, true},
		{pgStore + "postgres:\n", 15 * time.Second, 5 * time.Second, 0, true},
		{pgStore + "postgres: {lease_ttl: 6s}\n", 6 * time.Second, 2 * time.Second, 0, true},
		{pgStore + "postgres: {renew_every: 14s}\n", 15 * time.Second, 14 * time.Second, 0, true},
		{pgStore + "postgres: {max_conns: 1}\n", 15 * time.Second, 5 * time.Second, 1, true},
	} {
		c, err := Parse([]byte(tc.src), "backplane.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		p := c.Postgres
		if p.LeaseTTL != tc.ttl || p.RenewEvery != tc.renew || p.MaxConns != tc.maxConns || (p.Line > 0) != tc.sectionGiven {
			t.Errorf("%q: %+v, want lease %s, renew %s, max_conns %d", tc.src, p, tc.ttl, tc.renew, tc.maxConns)
		}
	}
	// A folder store: nothing to tune, nothing filled in.
	c, err := Parse([]byte("store: .backplane\n"), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres != (PostgresConfig{}) {
		t.Errorf("folder store: Postgres = %+v, want zero", c.Postgres)
	}
}

func TestPostgresSectionErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		want      string
	}{
		{"folder store", "store: .backplane\npostgres: {lease_ttl: 3s}\n", 2, "postgres options given but the store is a folder"},
		{"default folder store", "policy: []\n\npostgres:\n  lease_ttl: 3s\n", 3, "the store is a folder (.backplane)"},
		{"empty section, folder store", "postgres: {}\nstore: state\n", 1, "the store is a folder (state)"},
		{"renew not shorter", pgStore + "postgres:\n  lease_ttl: 3s\n  renew_every: 3s\n", 4, "must be shorter than lease_ttl 3s"},
		{"renew before ttl", pgStore + "postgres:\n  renew_every: 5s\n  lease_ttl: 4s\n", 3, "must be shorter than lease_ttl 4s"},
		{"renew vs default ttl", pgStore + "postgres: {renew_every: 15s}\n", 2, "shorter than the default lease_ttl 15s"},
		{"zero renew", pgStore + "postgres: {renew_every: 0s}\n", 2, "renew_every must be positive"},
		{"negative renew", pgStore + "postgres: {renew_every: -1s}\n", 2, "must not be negative"},
		{"short ttl", pgStore + "postgres: {lease_ttl: 500ms}\n", 2, "too short: at least 1s"},
		{"zero ttl", pgStore + "postgres: {lease_ttl: 0s}\n", 2, "too short"},
		{"ttl not a duration", pgStore + "postgres: {lease_ttl: forever}\n", 2, "bad duration"},
		{"ttl a number", pgStore + "postgres: {lease_ttl: 1.5}\n", 2, "must be a duration"},
		{"zero conns", pgStore + "postgres: {max_conns: 0}\n", 2, "max_conns must be a positive number"},
		{"too many conns", pgStore + "postgres: {max_conns: 4294967296}\n", 2, "max_conns must be a positive number"},
		{"conns a string", pgStore + "postgres: {max_conns: many}\n", 2, "must be an integer"},
		{"unknown key", pgStore + "postgres:\n  schema: bp\n", 3, `unknown key "schema" in postgres`},
		{"a list", pgStore + "postgres: [lease_ttl]\n", 2, "must be a mapping"},
		{"duplicate key", pgStore + "postgres:\n  lease_ttl: 3s\n  lease_ttl: 4s\n", 4, "duplicate key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "backplane.yaml")
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *config.Error", err)
			}
			if ce.Line != tc.line || !strings.Contains(ce.Msg, tc.want) {
				t.Errorf("error %q at line %d, want line %d containing %q", ce.Msg, ce.Line, tc.line, tc.want)
			}
			if !strings.HasPrefix(ce.Error(), "backplane.yaml:") {
				t.Errorf("error %q does not name the file", ce.Error())
			}
		})
	}
}
