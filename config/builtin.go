package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentbackplane/backplane/tool"
)

// Builtin configures the nine built-in tools (read, write, edit, ls, glob,
// grep, bash, url_fetch, ask_user_question), confined to Config.Workspace.
//
//	workspace: .                   # the root every built-in tool is confined to
//	builtin:
//	  enable: [read, write, edit, ls, glob, grep, bash, url_fetch, ask_user_question]
//	  safety:
//	    write: {requires_approval: false}   # re-flag one tool
//	  bash: {timeout: 120s, max_timeout: 600s, env: [PATH, HOME]}
//	  url_fetch: {allow: []}       # host:port entries exempt from the private-address refusal
//
// Without a builtin section all nine are enabled with their own safety
// flags (write, edit and bash need an approval); the policy still decides
// who may call them. enable: [] enables none.
type Builtin struct {
	// Enable lists the enabled tools, in the file's order.
	Enable []string
	// Safety re-flags tools; a nil field keeps the tool's own flag.
	Safety map[string]SafetyOverride
	Bash   BashConfig
	// BashSandbox overrides the top-level sandbox section for bash.
	BashSandbox *SandboxConfig
	// URLFetchAllow lists host:port entries exempt from the refusal of
	// loopback and private addresses.
	URLFetchAllow []string
	// Line is where the builtin section starts (0 when absent).
	Line int
}

// BashConfig configures the bash tool (zero fields: the tool's defaults).
type BashConfig struct {
	// Timeout applies when a call gives none; MaxTimeout caps what a call
	// asks for.
	Timeout, MaxTimeout time.Duration
	// Env names the variables passed from the gateway's environment; nil
	// means the tool's default.
	Env []string
}

// SafetyOverride changes some of a tool's safety flags.
type SafetyOverride struct {
	ReadOnly, Idempotent, RequiresApproval *bool
}

// Apply returns s with the flags o sets changed.
func (o SafetyOverride) Apply(s tool.Safety) tool.Safety {
	if o.ReadOnly != nil {
		s.ReadOnly = *o.ReadOnly
	}
	if o.Idempotent != nil {
		s.Idempotent = *o.Idempotent
	}
	if o.RequiresApproval != nil {
		s.RequiresApproval = *o.RequiresApproval
	}
	return s
}

// builtinNames are the names of the built-in tools: the default of
// builtin.enable.
func builtinNames() []string { return tool.BuiltinNames() }

func (p *parser) builtinTool(v *yaml.Node, what string) (string, error) {
	name, err := p.str(v, what)
	if err != nil {
		return "", err
	}
	if !slices.Contains(builtinNames(), name) {
		return "", p.errAt(v, "%s: %q is not a built-in tool (they are %v)", what, name, builtinNames())
	}
	return name, nil
}

func (p *parser) builtin(c *Config, v *yaml.Node) error {
	c.Builtin.Line = v.Line
	return p.mapping(v, "builtin", func(key string, k, v *yaml.Node) error {
		switch key {
		case "enable":
			c.Builtin.Enable = []string{}
			return p.sequence(v, "enable", func(item *yaml.Node) error {
				name, err := p.builtinTool(item, "enable")
				if err == nil && !slices.Contains(c.Builtin.Enable, name) {
					c.Builtin.Enable = append(c.Builtin.Enable, name)
				}
				return err
			})
		case "safety":
			c.Builtin.Safety = map[string]SafetyOverride{}
			return p.mapping(v, "safety", func(tool string, k, v *yaml.Node) error {
				if _, err := p.builtinTool(k, "safety"); err != nil {
					return err
				}
				var o SafetyOverride
				err := p.mapping(v, "safety of "+tool, func(flag string, k, v *yaml.Node) error {
					b, err := p.boolean(v, flag)
					switch flag {
					case "read_only":
						o.ReadOnly = &b
					case "idempotent":
						o.Idempotent = &b
					case "requires_approval":
						o.RequiresApproval = &b
					}
					return err
				}, "read_only", "idempotent", "requires_approval")
				c.Builtin.Safety[tool] = o
				return err
			}, builtinNames()...)
		case "bash":
			return p.mapping(v, "bash", func(key string, k, v *yaml.Node) error {
				switch key {
				case "timeout", "max_timeout":
					d, err := p.duration(v, key)
					if err != nil {
						return err
					}
					if d < time.Second {
						return p.errAt(v, "bash %s must be at least 1s", key)
					}
					if key == "timeout" {
						c.Builtin.Bash.Timeout = d
					} else {
						c.Builtin.Bash.MaxTimeout = d
					}
				case "sandbox":
					s, err := p.sandbox(c, v)
					c.Builtin.BashSandbox = s
					return err
				case "env":
					env, err := p.strList(v, "env")
					for _, name := range env {
						if !envName.MatchString(name) {
							return p.errAt(v, "env: %q is not a variable name", name)
						}
					}
					c.Builtin.Bash.Env = env
					return err
				}
				return nil
			}, "timeout", "max_timeout", "env", "sandbox")
		case "url_fetch":
			return p.mapping(v, "url_fetch", func(key string, k, v *yaml.Node) error {
				allow, err := p.strList(v, "allow")
				c.Builtin.URLFetchAllow = allow
				return err
			}, "allow")
		}
		return nil
	}, "enable", "safety", "bash", "url_fetch")
}

// finishBuiltin applies defaults and checks what spans sections.
func (p *parser) finishBuiltin(c *Config) error {
	c.Workspace = resolve(c.Dir, c.Workspace)
	if c.Builtin.Enable == nil {
		c.Builtin.Enable = builtinNames()
	}
	b := &c.Builtin
	if b.Bash.Timeout > 0 && b.Bash.MaxTimeout > 0 && b.Bash.Timeout > b.Bash.MaxTimeout {
		return &Error{File: p.file, Line: b.Line, Msg: fmt.Sprintf("bash timeout %s is over max_timeout %s", b.Bash.Timeout, b.Bash.MaxTimeout)}
	}
	for _, t := range c.Tools {
		if slices.Contains(b.Enable, t.Name) {
			return &Error{File: p.file, Line: t.Line, Msg: fmt.Sprintf(
				"tool %s has the name of an enabled built-in tool; rename it or leave %s out of builtin.enable", t.Name, t.Name)}
		}
	}
	return nil
}

// PrivatePaths are the gateway's own files, which the built-in tools must
// not reach even when they lie inside the workspace (by default they do:
// workspace ., store .backplane): the store folder (the journal holds every
// call's arguments), the audit log (and the operational log of one-shot
// commands beside it), and this configuration file (it may
// hold secrets for upstream servers).
func (c *Config) PrivatePaths() []string {
	var out []string
	kind := c.StoreKind
	if kind == "" { // a Config built by hand
		kind = StoreKindOf(c.Store)
	}
	if c.Store != "" && kind == StoreSQLite {
		out = append(out, resolve(c.Dir, c.Store))
	}
	if c.Log.File != "" {
		// The audit log, and the operational log of one-shot commands
		// beside it (assemble.OperationalLogName).
		f := resolve(c.Dir, c.Log.File)
		out = append(out, f, filepath.Join(filepath.Dir(f), "backplane.log"))
	}
	if c.Path != "" {
		out = append(out, filepath.Join(c.Dir, filepath.Base(c.Path)))
	}
	// A Config built by hand may leave Dir empty: a relative path would be
	// refused by the tools, and means nothing to hide that can be named.
	return slices.DeleteFunc(out, func(p string) bool { return !filepath.IsAbs(p) })
}
