package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// The file is decoded into yaml.Node and walked by hand, never unmarshalled
// into structs: that is what gives every error its line, and what lets
// unknown keys, duplicate keys and loose types be refused rather than
// guessed at.

type parser struct {
	file string
	data []byte
	// storeKey is the key the store was given by (store, store_env or
	// store_file), so that a second one is refused.
	storeKey string
}

func (p *parser) errAt(n *yaml.Node, format string, args ...any) *Error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

var yamlLineErr = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// maxSearchLines bounds the search for a syntax error's line below.
const maxSearchLines = 5000

// syntaxError turns a yaml.v3 error into an *Error with a line. The
// library's own line numbers cannot be trusted (some are 0-based, some
// missing), so the line is found instead: it is the last line of the
// shortest prefix of the file, in whole lines, that fails with the same
// message. The library's number is the fallback.
func (p *parser) syntaxError(err error) *Error {
	line, msg := splitYAMLError(err)
	lines := bytes.SplitAfter(p.data, []byte("\n"))
	if len(lines) <= maxSearchLines {
		end := 0
		for i, l := range lines {
			end += len(l)
			var n yaml.Node
			if e := decodeAll(p.data[:end], &n); e != nil {
				if _, m := splitYAMLError(e); m == msg {
					line = i + 1
					break
				}
			}
		}
	}
	return &Error{File: p.file, Line: line, Msg: "invalid YAML: " + msg}
}

func splitYAMLError(err error) (int, string) {
	m := yamlLineErr.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, err.Error()
	}
	line, _ := strconv.Atoi(m[1])
	return line, m[2]
}

// decodeAll decodes every document of data, as parse does, turning a panic
// of the YAML library into an error.
func decodeAll(data []byte, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		if err := dec.Decode(n); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func (p *parser) parse(c *Config) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &Error{File: p.file, Msg: fmt.Sprintf("invalid YAML: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(p.data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return p.finish(c) // an empty file: every default
		}
		return p.syntaxError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return p.syntaxError(err)
		}
		return p.errAt(&extra, "a second YAML document: the configuration is one document")
	}
	root := doc.Content[0]
	if isNull(root) {
		return p.finish(c)
	}
	if err := p.mapping(root, "the configuration", func(key string, k, v *yaml.Node) error {
		switch key {
		case "store":
			return p.store(c, v)
		case "store_env", "store_file":
			return p.storeFrom(c, key, v)
		case "policy":
			return p.policy(c, v)
		case "approvals":
			return p.approvals(c, v)
		case "budgets":
			return p.budgets(c, v)
		case "tools":
			return p.tools(c, v)
		case "limits":
			return p.limits(c, v)
		case "log":
			return p.log(c, v)
		case "workspace":
			var err error
			c.Workspace, err = p.str(v, "workspace")
			if err == nil && c.Workspace == "" {
				err = p.errAt(v, "workspace must not be empty")
			}
			return err
		case "builtin":
			return p.builtin(c, v)
		case "serve":
			return p.serve(c, v)
		case "servers":
			return p.servers(c, v)
		case "postgres":
			return p.postgres(c, k, v)
		case "operators":
			return p.operators(c, v)
		case "retention":
			return p.retention(c, v)
		case "sandbox":
			s, err := p.sandbox(c, v)
			if s != nil {
				c.Sandbox = *s
			}
			return err
		case "tracing":
			return p.tracing(c, k, v)
		case "secrets":
			return p.secrets(c, v)
		}
		return nil
	}, "store", "store_env", "store_file", "policy", "approvals", "budgets", "tools", "limits", "log", "workspace", "builtin", "serve", "servers", "postgres", "operators", "retention", "sandbox", "tracing", "secrets"); err != nil {
		return err
	}
	return p.finish(c)
}

// finish applies what depends on several sections, once all are read.
func (p *parser) finish(c *Config) error {
	if err := p.finishBuiltin(c); err != nil {
		return err
	}
	p.finishServe(c)
	if err := p.finishSecrets(c); err != nil {
		return err
	}
	if err := p.finishOperators(c); err != nil {
		return err
	}
	if err := p.finishPostgres(c); err != nil {
		return err
	}
	if err := p.finishCallerOAuth(c); err != nil {
		return err
	}
	c.StoreKind = StoreKindOf(c.Store)
	if c.StoreKind == StoreSQLite {
		c.Store = resolve(c.Dir, c.Store)
	}
	var err error
	if c.compiled, err = c.CompilePolicy(); err != nil {
		return err
	}
	for i := range c.Tools {
		t := &c.Tools[i]
		if t.Timeout == 0 {
			t.Timeout = c.Limits.Timeout
		}
		if t.MaxOutputBytes == 0 {
			t.MaxOutputBytes = c.Limits.MaxResultBytes
		}
		if t.Dir == "" {
			// The workspace, not the configuration's folder: that may be
			// a folder the tools were never meant to work in.
			t.Dir = c.Workspace
		}
	}
	return nil
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}
