package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentbackplane/backplane/approval"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/policy"
)

// The file is decoded into yaml.Node and walked by hand, never unmarshalled
// into structs: that is what gives every error its line, and what lets
// unknown keys, duplicate keys and loose types be refused rather than
// guessed at.

type parser struct {
	file string
	data []byte
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
		}
		return nil
	}, "store", "policy", "approvals", "budgets", "tools", "limits", "log", "workspace", "builtin", "serve", "servers", "postgres", "operators", "retention", "sandbox", "tracing"); err != nil {
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
	if err := p.finishOperators(c); err != nil {
		return err
	}
	if err := p.finishPostgres(c); err != nil {
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

// --- sections ---

var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

func (p *parser) store(c *Config, v *yaml.Node) error {
	s, err := p.str(v, "store")
	if err != nil {
		return err
	}
	switch {
	case s == "":
		return p.errAt(v, "store must name a folder or a postgres:// URL")
	case StoreKindOf(s) == StorePostgres:
	case urlScheme.MatchString(s):
		return p.errAt(v, "store %q: only folders and postgres:// URLs are supported", strings.SplitN(s, "://", 2)[0]+"://...")
	}
	c.Store = s
	return nil
}

func (p *parser) policy(c *Config, v *yaml.Node) error {
	return p.sequence(v, "policy", func(item *yaml.Node) error {
		r := policy.Rule{Pos: policy.Pos{File: p.file, Line: item.Line}}
		var callerNode *yaml.Node
		err := p.mapping(item, "a policy rule", func(key string, k, v *yaml.Node) error {
			var err error
			switch key {
			case "caller":
				callerNode = v
				r.Caller, err = p.str(v, "caller")
			case "allow":
				r.Allow, r.Pos.Allow, err = p.patterns(v, "allow")
			case "approve":
				r.Approve, r.Pos.Approve, err = p.patterns(v, "approve")
			case "deny":
				r.Deny, r.Pos.Deny, err = p.patterns(v, "deny")
			case "rules":
				r.Conditions, err = p.conditions(v)
			case "resources":
				r.Resources, r.Pos.Resources, err = p.patterns(v, "resources")
			case "prompts":
				r.Prompts, r.Pos.Prompts, err = p.patterns(v, "prompts")
			case "approvers":
				r.Approvers, _, err = p.patterns(v, "approvers")
			case "self_approve":
				r.SelfApprove, err = p.boolean(v, "self_approve")
			}
			return err
		}, "caller", "allow", "approve", "deny", "rules", "resources", "prompts", "approvers", "self_approve")
		if err != nil {
			return err
		}
		if r.Caller == "" {
			at := item
			if callerNode != nil {
				at = callerNode
			}
			return p.errAt(at, "a policy rule needs a caller")
		}
		c.Policy = append(c.Policy, r)
		return nil
	})
}

// patterns reads a list of entries (tool names, path.Match globs or
// TOOL(PATTERN)) and their lines; [Config.CompilePolicy] checks them once
// every section is read.
func (p *parser) patterns(v *yaml.Node, what string) ([]string, []int, error) {
	var out []string
	var lines []int
	err := p.sequence(v, what, func(item *yaml.Node) error {
		s, err := p.str(item, what+" entry")
		if err != nil {
			return err
		}
		if s == "" {
			return p.errAt(item, "%s: an empty tool pattern", what)
		}
		out = append(out, s)
		lines = append(lines, item.Line)
		return nil
	})
	return out, lines, err
}

// conditions reads CEL rules: "- allow|approve|deny: TOOL" with "if: EXPR".
func (p *parser) conditions(v *yaml.Node) ([]policy.Condition, error) {
	var out []policy.Condition
	err := p.sequence(v, "rules", func(item *yaml.Node) error {
		cond := policy.Condition{Line: item.Line}
		var ifNode *yaml.Node
		err := p.mapping(item, "a CEL rule", func(key string, k, v *yaml.Node) error {
			var err error
			switch key {
			case "allow", "approve", "deny":
				if cond.Effect != "" {
					return p.errAt(k, "a CEL rule has one of allow, approve and deny, not both %s and %s", cond.Effect, key)
				}
				cond.Effect = policy.Effect(key)
				cond.Tool, err = p.str(v, key)
				if err == nil && cond.Tool == "" {
					err = p.errAt(v, "%s: name a tool", key)
				}
			case "if":
				ifNode = v
				cond.If, err = p.str(v, "if")
			}
			return err
		}, "allow", "approve", "deny", "if")
		if err != nil {
			return err
		}
		if cond.Effect == "" {
			return p.errAt(item, "a CEL rule needs allow, approve or deny: TOOL")
		}
		if ifNode == nil || cond.If == "" {
			return p.errAt(item, "a CEL rule needs if: EXPRESSION")
		}
		cond.Line = ifNode.Line
		out = append(out, cond)
		return nil
	})
	return out, err
}

func (p *parser) approvals(c *Config, v *yaml.Node) error {
	return p.mapping(v, "approvals", func(key string, k, v *yaml.Node) error {
		switch key {
		case "expire":
			d, err := p.duration(v, "expire")
			if err != nil {
				return err
			}
			if d <= 0 {
				return p.errAt(v, "approvals expire must be positive")
			}
			c.Approvals.Expire = d
		case "wait":
			d, err := p.duration(v, "wait")
			if err != nil {
				return err
			}
			if d > MaxServeApprovalWait {
				return p.errAt(v, "approvals wait %s: at most %s (a waiting call must return before its client gives up)", d, MaxServeApprovalWait)
			}
			c.Approvals.Wait = d
		case "self_approve_timeout":
			d, err := p.duration(v, "self_approve_timeout")
			if err != nil {
				return err
			}
			if d <= 0 || d > approval.MaxSelfApproveTimeout {
				return p.errAt(v, "approvals self_approve_timeout %s: must be from 1s to %s (how long the person at the caller's client has to answer)", d, approval.MaxSelfApproveTimeout)
			}
			c.Approvals.SelfApproveTimeout = d
		case "max_pending":
			n, err := p.integer(v, "max_pending")
			if err != nil {
				return err
			}
			if n <= 0 {
				return p.errAt(v, "approvals max_pending must be positive")
			}
			c.Approvals.MaxPending = int(n)
		}
		return nil
	}, "expire", "wait", "self_approve_timeout", "max_pending")
}

func (p *parser) limits(c *Config, v *yaml.Node) error {
	return p.mapping(v, "limits", func(key string, k, v *yaml.Node) error {
		switch key {
		case "max_argument_bytes", "max_result_bytes":
			n, err := p.positiveInt(v, key)
			if err != nil {
				return err
			}
			if key == "max_argument_bytes" {
				c.Limits.MaxArgumentBytes = n
			} else {
				c.Limits.MaxResultBytes = n
			}
		case "timeout":
			d, err := p.duration(v, key)
			if err != nil {
				return err
			}
			if d <= 0 {
				return p.errAt(v, "timeout must be positive")
			}
			c.Limits.Timeout = d
		}
		return nil
	}, "max_argument_bytes", "max_result_bytes", "timeout")
}

func (p *parser) log(c *Config, v *yaml.Node) error {
	return p.mapping(v, "log", func(key string, k, v *yaml.Node) error {
		switch key {
		case "max_size":
			n, err := p.size(v, "log max_size")
			if err != nil {
				return err
			}
			if n < minLogSize {
				return p.errAt(v, "log max_size must be at least 1MB (the file is rotated in whole MB), not %d bytes", n)
			}
			c.Log.MaxSize = n
			return nil
		case "max_files":
			n, err := p.integer(v, "log max_files")
			if err != nil {
				return err
			}
			if n < 1 || n > maxLogFiles {
				return p.errAt(v, "log max_files must be a count of rotated files from 1 to %d, not %d", maxLogFiles, n)
			}
			c.Log.MaxFiles = int(n)
			return nil
		}
		s, err := p.str(v, key)
		if err != nil {
			return err
		}
		switch key {
		case "level":
			if !slices.Contains([]string{"debug", "info", "warn", "error"}, s) {
				return p.errAt(v, "log level %q: debug, info, warn or error", s)
			}
			c.Log.Level = s
		case "file":
			if s != "" {
				s = resolve(c.Dir, s)
			}
			c.Log.File = s
		}
		return nil
	}, "level", "file", "max_size", "max_files")
}

// Bounds of the audit log's rotation.
const (
	minLogSize  = 1 << 20
	maxLogSize  = 1 << 40
	maxLogFiles = 10000
)

// sizeUnits are the units a size may be written in: powers of 1024, as
// people mean them for files.
var sizeUnits = map[string]int64{"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

var sizeText = regexp.MustCompile(`^([0-9]{1,13})\s*([A-Za-z]*)$`)

// size reads a size in bytes: an integer, or a number with a unit (100MB,
// 1GB; KB, MB and GB are powers of 1024), at most 1 TiB.
func (p *parser) size(v *yaml.Node, what string) (int64, error) {
	n := deref(v)
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int") {
		return 0, p.errAt(v, "%s must be a size such as 100MB, not %s", what, describe(v))
	}
	m := sizeText.FindStringSubmatch(n.Value)
	if m == nil {
		return 0, p.errAt(v, "%s: bad size %q: write it as 100MB or 1GB", what, n.Value)
	}
	unit, ok := sizeUnits[m[2]]
	if !ok {
		return 0, p.errAt(v, "%s: unknown unit %q in %q: B, KB, MB or GB", what, m[2], n.Value)
	}
	num, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || num > maxLogSize/unit {
		return 0, p.errAt(v, "%s: %s is more than 1TB", what, n.Value)
	}
	return num * unit, nil
}

var (
	toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	envName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (p *parser) tools(c *Config, v *yaml.Node) error {
	names := map[string]int{} // name -> line
	return p.sequence(v, "tools", func(item *yaml.Node) error {
		t := ToolConfig{Line: item.Line} // Dir: the workspace unless given (finish)
		var nameNode, schemaKey, schemaNode *yaml.Node
		err := p.mapping(item, "a tool", func(key string, k, v *yaml.Node) error {
			var err error
			switch key {
			case "name":
				nameNode = v
				if t.Name, err = p.str(v, "name"); err == nil && !toolName.MatchString(t.Name) {
					err = p.errAt(v, "tool name %q: use 1 to 128 letters, digits, '_', '-' or '.'", t.Name)
				}
			case "description":
				t.Description, err = p.str(v, "description")
			case "input_schema":
				schemaKey, schemaNode = k, v
			case "command":
				if t.Command, err = p.strList(v, "command"); err == nil && (len(t.Command) == 0 || t.Command[0] == "") {
					err = p.errAt(v, "command must name a program: [program, arg, ...]")
				}
			case "env":
				err = p.sequence(v, "env", func(item *yaml.Node) error {
					s, err := p.str(item, "env entry")
					if err == nil && !envName.MatchString(s) {
						err = p.errAt(item, "env: %q is not an environment variable name", s)
					}
					t.Env = append(t.Env, s)
					return err
				})
			case "dir":
				var s string
				if s, err = p.str(v, "dir"); err == nil && s != "" {
					t.Dir = resolve(c.Dir, s)
				}
			case "timeout":
				if t.Timeout, err = p.duration(v, "timeout"); err == nil && t.Timeout <= 0 {
					err = p.errAt(v, "timeout must be positive")
				}
			case "max_output_bytes":
				t.MaxOutputBytes, err = p.positiveInt(v, key)
			case "main_arg":
				t.MainArg, err = p.mainArg(v)
			case "sandbox":
				t.Sandbox, err = p.sandbox(c, v)
			case "safety":
				err = p.mapping(v, "safety", func(key string, k, v *yaml.Node) error {
					b, err := p.boolean(v, key)
					switch key {
					case "read_only":
						t.Safety.ReadOnly = b
					case "idempotent":
						t.Safety.Idempotent = b
					case "requires_approval":
						t.Safety.RequiresApproval = b
					}
					return err
				}, "read_only", "idempotent", "requires_approval")
			}
			return err
		}, "name", "description", "input_schema", "command", "env", "dir", "timeout", "max_output_bytes", "safety", "sandbox", "main_arg")
		if err != nil {
			return err
		}
		if nameNode == nil {
			return p.errAt(item, "a tool needs a name")
		}
		if line, ok := names[t.Name]; ok {
			return p.errAt(nameNode, "tool %s is already defined at line %d", t.Name, line)
		}
		names[t.Name] = nameNode.Line
		if t.Command == nil {
			return p.errAt(item, "tool %s needs a command: [program, arg, ...]", t.Name)
		}
		if schemaNode == nil || isNull(schemaNode) {
			at := item
			if schemaKey != nil {
				at = schemaKey
			}
			return p.errAt(at, "tool %s needs an input_schema", t.Name)
		}
		if err := p.schema(&t, c, schemaKey, schemaNode); err != nil {
			return err
		}
		c.Tools = append(c.Tools, t)
		return nil
	})
}

// schema converts a tool's input_schema and compiles it, as the gateway
// will, so that a schema the gateway would refuse stops the start.
func (p *parser) schema(t *ToolConfig, c *Config, key, v *yaml.Node) error {
	var b bytes.Buffer
	nodes := maxSchemaNodes
	if err := p.emitJSON(&b, v, 0, &nodes); err != nil {
		return err
	}
	t.InputSchemaJSON = b.Bytes()
	dec := json.NewDecoder(bytes.NewReader(t.InputSchemaJSON))
	dec.UseNumber()
	if err := dec.Decode(&t.InputSchema); err != nil {
		return p.errAt(key, "tool %s: input_schema: %v", t.Name, err) // cannot happen: emitJSON wrote it
	}
	limits := c.Limits.Schema()
	if _, err := inputschema.CompileValue(t.InputSchema, &inputschema.CompileOptions{Limits: limits}); err != nil {
		return p.errAt(key, "tool %s: input_schema: %v", t.Name, err)
	}
	return nil
}

// --- JSON from YAML ---

const (
	// maxSchemaNodes bounds one schema's size after aliases are expanded,
	// so a few anchors cannot make it explode.
	maxSchemaNodes = 100_000
	maxSchemaDepth = 256
)

var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// emitJSON writes the JSON value n denotes, keeping mapping order, and
// refuses what JSON cannot hold exactly.
func (p *parser) emitJSON(b *bytes.Buffer, n *yaml.Node, depth int, nodes *int) error {
	at := n
	n = deref(n)
	if *nodes--; *nodes < 0 {
		return p.errAt(at, "input_schema is larger than %d nodes (after expanding aliases)", maxSchemaNodes)
	}
	if depth > maxSchemaDepth {
		return p.errAt(at, "input_schema is nested deeper than %d", maxSchemaDepth)
	}
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key, err := p.key(k, seen)
			if err != nil {
				return err
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(jsonString(key))
			b.WriteByte(':')
			if err := p.emitJSON(b, v, depth+1, nodes); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, v := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := p.emitJSON(b, v, depth+1, nodes); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!str", "!!timestamp": // a date is text in JSON
			b.Write(jsonString(n.Value))
		case "!!null":
			b.WriteString("null")
		case "!!bool":
			v, err := p.boolean(n, "value")
			if err != nil {
				return err
			}
			b.WriteString(strconv.FormatBool(v))
		case "!!int", "!!float":
			num, err := p.number(n)
			if err != nil {
				return err
			}
			b.WriteString(num)
		default:
			return p.errAt(at, "%s values cannot be written in JSON", tag)
		}
	default:
		return p.errAt(at, "unexpected YAML node")
	}
	return nil
}

// number returns the JSON text of a YAML number, exactly: JSON's own
// notation is kept as written; a leading '+' is dropped; 0x and 0o integers
// are converted exactly; the rest (.inf, .nan, 1_000, 017, 1.) is refused
// rather than guessed at.
func (p *parser) number(n *yaml.Node) (string, error) {
	text := n.Value
	t := strings.TrimPrefix(text, "+")
	if jsonNumber.MatchString(t) {
		return t, nil
	}
	if n.ShortTag() == "!!int" {
		sign, body := "", t
		if strings.HasPrefix(body, "-") {
			sign, body = "-", body[1:]
		}
		base := 0
		switch {
		case strings.HasPrefix(body, "0x"):
			base = 16
		case strings.HasPrefix(body, "0o"):
			base = 8
		}
		if base != 0 {
			if v, ok := new(big.Int).SetString(body[2:], base); ok {
				if v.Sign() == 0 {
					sign = ""
				}
				return sign + v.String(), nil
			}
		}
	}
	return "", p.errAt(n, "the number %s cannot be written exactly in JSON; write it as a JSON number (e.g. 15, -1.5, 2e3) or quote it", text)
}

func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// --- typed scalars and collections ---

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node holds, for "expected X, got Y".
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int":
			return "the integer " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "nothing"
		case "!!timestamp":
			return "the date " + n.Value
		}
		return fmt.Sprintf("a %s value", n.ShortTag())
	}
	return "an unexpected node"
}

// key checks a mapping key: a string, not a merge key, not seen before.
func (p *parser) key(k *yaml.Node, seen map[string]int) (string, error) {
	kd := deref(k)
	if kd.Kind != yaml.ScalarNode {
		return "", p.errAt(k, "a key must be a string, not %s", describe(k))
	}
	switch kd.ShortTag() {
	case "!!str":
	case "!!merge":
		return "", p.errAt(k, "merge keys (<<) are not supported")
	default:
		return "", p.errAt(k, "a key must be a string, not %s (quote it)", describe(k))
	}
	if line, ok := seen[kd.Value]; ok {
		return "", p.errAt(k, "duplicate key %q (first at line %d)", kd.Value, line)
	}
	seen[kd.Value] = k.Line
	return kd.Value, nil
}

// mapping walks the mapping v, calling fn for each key in order. When known
// is not empty, other keys are refused. A null v is an empty mapping.
func (p *parser) mapping(v *yaml.Node, what string, fn func(key string, k, v *yaml.Node) error, known ...string) error {
	if isNull(v) {
		return nil
	}
	n := deref(v)
	if n.Kind != yaml.MappingNode {
		return p.errAt(v, "%s must be a mapping, not %s", what, describe(v))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key, err := p.key(k, seen)
		if err != nil {
			return err
		}
		if len(known) > 0 && !slices.Contains(known, key) {
			return p.errAt(k, "unknown key %q in %s (known: %s)", key, what, strings.Join(known, ", "))
		}
		if err := fn(key, k, val); err != nil {
			return err
		}
	}
	return nil
}

// sequence walks the list v. A null v is an empty list.
func (p *parser) sequence(v *yaml.Node, what string, fn func(item *yaml.Node) error) error {
	if isNull(v) {
		return nil
	}
	n := deref(v)
	if n.Kind != yaml.SequenceNode {
		return p.errAt(v, "%s must be a list, not %s", what, describe(v))
	}
	for _, item := range n.Content {
		if err := fn(item); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) str(v *yaml.Node, what string) (string, error) {
	n := deref(v)
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str":
			return n.Value, nil
		case "!!null":
			return "", nil
		}
	}
	return "", p.errAt(v, "%s must be a string, not %s (quote it if it is text)", what, describe(v))
}

func (p *parser) strList(v *yaml.Node, what string) ([]string, error) {
	out := []string{}
	err := p.sequence(v, what, func(item *yaml.Node) error {
		s, err := p.str(item, what+" entry")
		out = append(out, s)
		return err
	})
	return out, err
}

var decimal = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

// integer reads a decimal integer; other notations (0x1F, 017, 1_000) are
// refused rather than read one way or another.
func (p *parser) integer(v *yaml.Node, what string) (int64, error) {
	n := deref(v)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, p.errAt(v, "%s must be an integer, not %s", what, describe(v))
	}
	if !decimal.MatchString(n.Value) {
		return 0, p.errAt(v, "%s: write the integer %s in decimal", what, n.Value)
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, p.errAt(v, "%s: %s is out of range", what, n.Value)
	}
	return i, nil
}

func (p *parser) positiveInt(v *yaml.Node, what string) (int, error) {
	i, err := p.integer(v, what)
	if err != nil {
		return 0, err
	}
	if i <= 0 || i > 1<<40 {
		return 0, p.errAt(v, "%s must be a positive number of bytes, not %d", what, i)
	}
	return int(i), nil
}

func (p *parser) boolean(v *yaml.Node, what string) (bool, error) {
	n := deref(v)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		switch n.Value {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		}
	}
	return false, p.errAt(v, "%s must be true or false, not %s", what, describe(v))
}

// duration reads a Go duration (30s, 10m, 1h30m; a bare 0 is allowed).
func (p *parser) duration(v *yaml.Node, what string) (time.Duration, error) {
	n := deref(v)
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int") {
		return 0, p.errAt(v, "%s must be a duration such as 30s or 10m, not %s", what, describe(v))
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, p.errAt(v, "%s: bad duration %q: write it as 30s, 10m or 1h30m", what, n.Value)
	}
	if d < 0 {
		return 0, p.errAt(v, "%s must not be negative, not %s", what, n.Value)
	}
	return d, nil
}
