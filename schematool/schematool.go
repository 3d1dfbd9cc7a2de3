// Package schematool is the tooling around the tool input schema contract
// (package inputschema) that is not on a call's path: lint of a tools/list
// catalog, reporting every error of every tool, and the batch validation
// protocol (JSON Lines in, one verdict line out per line) with its cache of
// compiled schemas. The backplane command adds only flags and printing.
//
// Envelopes (a catalog, a tool entry, a batch line) are taken apart with
// jsonstrict's envelope readers: a schema or argument document inside them
// reaches the validator byte for byte, so its own faults are judged there,
// at the right stage. Schemas are compiled under [Options.Limits], the
// limits the gateway is configured with, so that tooling and gateway agree.
package schematool

import (
	"errors"
	"fmt"

	"github.com/agentbackplane/backplane/inputschema"
)

// StageInput marks an error of an envelope (a catalog's tool entry, a batch
// line), found before any schema or argument is looked at. It is this
// package's stage, not the validator's.
const StageInput inputschema.Stage = "input"

// Defaults of Options.
const (
	DefaultCacheEntries = 1024
	DefaultCacheBytes   = 64 << 20
	// MaxBatchLine bounds one batch input line; a longer line is answered
	// with an input error and skipped, and processing goes on.
	MaxBatchLine = 16 << 20
	// MaxCatalogBytes bounds a catalog given to Lint.
	MaxCatalogBytes = 64 << 20
)

// Options configure the tooling. A nil *Options, and every zero field, means
// the default.
type Options struct {
	// Limits are those schemas are compiled and arguments validated under:
	// pass the gateway's configured limits. Zero fields mean inputschema's
	// defaults.
	Limits inputschema.Limits
	// CacheEntries and CacheBytes bound the batch protocol's cache of
	// compiled schemas (by count, and by the schema text kept as keys).
	CacheEntries, CacheBytes int
}

func (o *Options) orDefault() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.CacheEntries <= 0 {
		c.CacheEntries = DefaultCacheEntries
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	return c
}

// ErrCatalog is wrapped by Lint when the catalog itself cannot be read: not
// JSON, not a tools/list result nor an array of tools, too large.
var ErrCatalog = errors.New("unusable catalog")

// ErrIO is wrapped by RunBatch when reading its input or writing its output
// fails; every verdict, negative or not, is an output line instead.
var ErrIO = errors.New("batch I/O failed")

// SchemaError extracts the contract error from what inputschema returned;
// anything else would be a bug there, reported as such, not as a verdict.
func SchemaError(err error) (*inputschema.Error, error) {
	var e *inputschema.Error
	if errors.As(err, &e) && e != nil {
		return e, nil
	}
	return nil, fmt.Errorf("unexpected error from the validator: %v", err)
}

// Wire is e as written on the wire: details always an object, never null.
// It copies, because compiled-schema errors may be shared.
func Wire(e *inputschema.Error) *inputschema.Error {
	c := *e
	if c.Details == nil {
		c.Details = map[string]any{}
	}
	return &c
}
