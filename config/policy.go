package config

import (
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentbackplane/backplane/policy"
)

// The policy section (see package policy for what entries mean):
//
//	policy:
//	  - caller: alice                        # exact name or glob
//	    allow: [read, "bash(git status)"]
//	    approve: ["write(docs/**)", "bash(*)"]
//	    deny: ["bash(*rm -rf*)", "read(**/.env)", "url_fetch(domain:internal.example)"]
//	    rules:                               # CEL conditions
//	      - allow: note
//	        if: 'size(args.text) < 200'
//
// A command tool or an upstream server names the argument TOOL(PATTERN)
// entries match with main_arg: a member name, or {name: MEMBER, match:
// text|path|shell|url}. Without match, a path-like name (path, file,
// file_path, dir, ...: policy.InferKind) is matched as a path, cleaned and
// taken relative to the workspace as the built-in tools' paths are, and
// any other as text; match: text keeps a path-like member's spelling. On a
// server it applies to every one of its tools.

var memberName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// mainArg reads main_arg: NAME or {name: NAME, match: KIND}; without a
// KIND, policy.InferKind(NAME).
func (p *parser) mainArg(v *yaml.Node) (*policy.MainArg, error) {
	m := &policy.MainArg{Kind: policy.KindText}
	kindGiven := false
	if deref(v).Kind == yaml.MappingNode {
		var nameNode *yaml.Node
		err := p.mapping(v, "main_arg", func(key string, k, v *yaml.Node) error {
			s, err := p.str(v, key)
			if err != nil {
				return err
			}
			switch key {
			case "name":
				nameNode, m.Field = v, s
			case "match":
				kind, ok := policy.ParseKind(s)
				if !ok {
					return p.errAt(v, "main_arg match %q: text, path, shell or url", s)
				}
				m.Kind, kindGiven = kind, true
			}
			return nil
		}, "name", "match")
		if err != nil {
			return nil, err
		}
		if nameNode == nil {
			return nil, p.errAt(v, "main_arg needs a name")
		}
		v = nameNode
	} else {
		var err error
		if m.Field, err = p.str(v, "main_arg"); err != nil {
			return nil, err
		}
	}
	if !memberName.MatchString(m.Field) {
		return nil, p.errAt(v, "main_arg %q: name a top-level member of the arguments", m.Field)
	}
	if !kindGiven {
		m.Kind = policy.InferKind(m.Field)
	}
	return m, nil
}

// PolicyOptions are the options the policy is compiled with: the main
// arguments the tools and servers name, the workspace, and which tool
// names exist.
func (c *Config) PolicyOptions() *policy.Options {
	o := &policy.Options{MainArgs: map[string]policy.MainArg{}}
	for _, t := range c.Tools {
		if t.MainArg != nil {
			o.MainArgs[t.Name] = *t.MainArg
		}
	}
	for _, s := range c.Servers {
		if s.MainArg != nil {
			o.MainArgs[s.ToolPrefix()+"*"] = *s.MainArg // the prefix is never "" here (parse refuses it)
		}
	}
	if c.Workspace != "" {
		o.Workspace = append(o.Workspace, c.Workspace)
		if real, err := filepath.EvalSymlinks(c.Workspace); err == nil && real != c.Workspace {
			o.Workspace = append(o.Workspace, real)
		}
	}
	return o
}

// KnownTool reports whether name is a tool this configuration defines: an
// enabled built-in tool, a command tool, or PREFIX.TOOL of a server (whose
// tools are known only once it is connected; any name may be a tool of a
// server with prefix "").
func (c *Config) KnownTool(name string) bool {
	if slices.Contains(c.Builtin.Enable, name) || slices.ContainsFunc(c.Tools, func(t ToolConfig) bool { return t.Name == name }) {
		return true
	}
	return slices.ContainsFunc(c.Servers, func(s ServerConfig) bool {
		p := s.ToolPrefix()
		return len(name) > len(p) && strings.HasPrefix(name, p)
	})
}

// CompilePolicy builds the policy the configuration describes. A rule that
// cannot match is an *Error with its line: a TOOL(PATTERN) for a tool
// without a main argument, a pattern or a CEL rule on a tool that is not
// defined, CEL that does not compile or is not boolean. A bare tool name
// that nothing defines is accepted, as before issue 11 (files written for
// tools registered later name them); `backplane policy check` lists it.
func (c *Config) CompilePolicy() (*policy.Rules, error) {
	o := c.PolicyOptions()
	rules := c.Policy
	// Entries that look at arguments must name a defined tool.
	for _, r := range rules {
		for _, cond := range r.Conditions {
			if err := c.checkKnown(r, cond.Tool, cond.Line); err != nil {
				return nil, err
			}
		}
		for _, list := range []struct {
			entries []string
			lines   []int
		}{{r.Allow, r.Pos.Allow}, {r.Approve, r.Pos.Approve}, {r.Deny, r.Pos.Deny}} {
			for i, e := range list.entries {
				tool, _, hasPat := strings.Cut(e, "(")
				if !hasPat {
					continue
				}
				line := r.Pos.Line
				if i < len(list.lines) {
					line = list.lines[i]
				}
				if err := c.checkKnown(r, tool, line); err != nil {
					return nil, err
				}
			}
		}
	}
	rs, err := policy.Compile(rules, o)
	var pe *policy.Error
	if errors.As(err, &pe) {
		file := pe.File
		if file == "" {
			file = c.Path
		}
		return nil, &Error{File: file, Line: pe.Line, Msg: pe.Msg}
	}
	if err != nil {
		return nil, &Error{File: c.Path, Msg: err.Error()}
	}
	return rs, nil
}

// CompiledPolicy is the policy Parse compiled, so that a load compiles it
// once; a Config built by hand, not by Parse, is compiled now. A Config
// whose policy, tools, servers or workspace were changed after Parse must
// be compiled again with [Config.CompilePolicy].
func (c *Config) CompiledPolicy() (*policy.Rules, error) {
	if c.compiled != nil {
		return c.compiled, nil
	}
	return c.CompilePolicy()
}

func (c *Config) checkKnown(r policy.Rule, tool string, line int) error {
	if tool == "" || strings.ContainsAny(tool, `*?[\`) || c.KnownTool(tool) {
		return nil
	}
	file := r.Pos.File
	if file == "" {
		file = c.Path
	}
	return &Error{File: file, Line: line, Msg: "policy: no tool is named " + tool + ", so this rule can never match"}
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
