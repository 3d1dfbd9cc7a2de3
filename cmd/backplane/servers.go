package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/tool"
)

func newServersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "servers",
		Short: "Add an upstream MCP server to the configuration, having looked at its tools",
	}
	cmd.AddCommand(newServersAddCmd(), newServersLoginCmd())
	return cmd
}

func newServersAddCmd() *cobra.Command {
	var configFlag, url, validator string
	var dryRun bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "add NAME (-- COMMAND [ARGS...] | --url URL)",
		Short: "Connect to a server, report what each validator makes of its tools, and write its entry",
		Long: `add starts the server (COMMAND and its ARGS, after --, run without a
shell) or connects to it (--url, streamable HTTP), lists its tools and
prints how many each validator accepts, subset (Backplane's own, the
default) and draft2020-12 (JSON Schema 2020-12 in full), and every keyword
the subset refuses, tool by tool. It then writes the server's entry at the
end of servers: in the configuration, with validator: set explicitly
(draft2020-12 when it accepts tools the subset refuses, else subset; or
--validator), every other byte of the file left as it was (its comments
and layout included), and prints the policy lines that would allow the
server's read-only tools. --dry-run prints the entry instead of writing
it. A name the configuration already has is refused.`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(args) == 0:
				return fmt.Errorf("servers add needs the server's NAME")
			case url == "" && (dash != 1 || len(args) < 2):
				return fmt.Errorf("servers add NAME -- COMMAND [ARGS...], or servers add NAME --url URL")
			case url != "" && len(args) != 1:
				return fmt.Errorf("servers add NAME --url URL takes no command")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			srv := upstream.Server{Name: args[0], URL: url, Validator: upstream.ValidatorSubset}
			if url == "" {
				srv.Command = args[1:]
			}
			if err := srv.Check(); err != nil {
				return &inputError{err}
			}
			switch validator {
			case "", upstream.ValidatorSubset, upstream.ValidatorDraft2020:
			default:
				return fmt.Errorf("--validator %s: %s or %s", validator, upstream.ValidatorSubset, upstream.ValidatorDraft2020)
			}
			path, _, err := config.Find(configFlag)
			if err != nil {
				return &inputError{err}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return &inputError{err}
			}
			cfg, err := config.Parse(data, path)
			if err != nil {
				return &inputError{err}
			}
			for _, s := range cfg.Servers {
				if s.Name == srv.Name {
					return inputErrorf("%s:%d has a server named %s already", path, s.Line, srv.Name)
				}
			}
			return addServer(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), addRequest{
				srv: srv, path: path, data: data, validator: validator, dryRun: dryRun, timeout: timeout,
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFlag, "config", "", configFlagHelp)
	fl.StringVar(&url, "url", "", "the server's streamable HTTP URL (instead of a command after --)")
	fl.StringVar(&validator, "validator", "", "write this validator (subset or draft2020-12) instead of the one chosen from the tools")
	fl.BoolVar(&dryRun, "dry-run", false, "print the entry instead of writing it")
	fl.DurationVar(&timeout, "connect-timeout", 2*time.Minute, "how long to wait for the server to start and list its tools (a first npx download is slow)")
	return cmd
}

type addRequest struct {
	srv       upstream.Server
	path      string
	data      []byte
	validator string
	dryRun    bool
	timeout   time.Duration
}

// probeRegistry takes an upstream's tools without a gateway: servers add
// only looks at them.
type probeRegistry struct {
	mu    sync.Mutex
	tools map[string]tool.Tool
}

func (r *probeRegistry) Register(_ context.Context, t tool.Tool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[t.Name]; ok {
		return fmt.Errorf("%s: %w", t.Name, tool.ErrAlreadyRegistered)
	}
	r.tools[t.Name] = t
	return nil
}

func (r *probeRegistry) Unregister(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.tools[name]
	delete(r.tools, name)
	return ok
}

func addServer(ctx context.Context, out, errOut io.Writer, req addRequest) error {
	L := termtext.Line
	reg := &probeRegistry{tools: map[string]tool.Tool{}}
	fmt.Fprintf(errOut, "servers add: connecting to %s...\n", L(req.srv.Name))
	u, err := upstream.Connect(ctx, req.srv, &upstream.Options{
		Registry: reg, ConnectTimeout: req.timeout,
		StartProgress: func(waited time.Duration) {
			fmt.Fprintf(errOut, "servers add: %s still starting (%s)\n", L(req.srv.Name), waited.Round(time.Second))
		},
	})
	if err != nil {
		return inputErrorf("%v", err)
	}
	subsetN, subsetRefused := u.Accepts(upstream.ValidatorSubset)
	draftN, draftRefused := u.Accepts(upstream.ValidatorDraft2020)
	reg.mu.Lock()
	tools := maps.Clone(reg.tools) // Close unregisters them
	reg.mu.Unlock()
	u.Close()
	n := len(tools)

	fmt.Fprintf(out, "server %s: %d tools\n", L(req.srv.Name), n)
	fmt.Fprintf(out, "  validator %s accepts %d of %d\n", upstream.ValidatorSubset, subsetN, n)
	fmt.Fprintf(out, "  validator %s accepts %d of %d\n", upstream.ValidatorDraft2020, draftN, n)
	if len(subsetRefused) > 0 {
		fmt.Fprintf(out, "  the subset refuses:\n")
		for _, t := range subsetRefused {
			fmt.Fprintf(out, "    %s: %s\n", L(t.Name), L(strings.Join(t.Keywords, ", ")))
		}
	}
	if len(draftRefused) > 0 {
		fmt.Fprintf(out, "  %s refuses:\n", upstream.ValidatorDraft2020)
		for _, t := range draftRefused {
			fmt.Fprintf(out, "    %s: %s\n", L(t.Name), L(strings.Join(t.Keywords, ", ")))
		}
	}
	chosen := req.validator
	if chosen == "" {
		// The subset stays the boundary unless the wider one is what makes
		// tools callable: then the choice is made here, explicitly, and
		// written down (D21).
		chosen = upstream.ValidatorSubset
		if draftN > subsetN {
			chosen = upstream.ValidatorDraft2020
		}
	}

	entry := serverEntry(req.srv, chosen)
	newData, line, err := appendServer(req.data, entry)
	if err != nil {
		return inputErrorf("%s: %v", req.path, err)
	}
	// What is written must load, with the server as meant.
	cfg, err := config.Parse(newData, req.path)
	if err != nil {
		return inputErrorf("%s: the file with the new entry would not load (%v); add it by hand:\n%s", req.path, err, entry.text("  "))
	}
	if i := slices.IndexFunc(cfg.Servers, func(s config.ServerConfig) bool { return s.Name == req.srv.Name }); i < 0 || cfg.Servers[i].Validator != chosen {
		return inputErrorf("%s: the new entry does not read back as written; add it by hand:\n%s", req.path, entry.text("  "))
	}

	if req.dryRun {
		fmt.Fprintf(out, "would add to %s (line %d), with validator: %s:\n", L(req.path), line, chosen)
		io.WriteString(out, termtext.Block(entry.text("  ")))
	} else {
		if err := writeFileAtomic(req.path, newData); err != nil {
			return err
		}
		fmt.Fprintf(out, "added server %s to %s (line %d), with validator: %s\n", L(req.srv.Name), L(req.path), line, chosen)
	}

	refused := subsetRefused
	if chosen == upstream.ValidatorDraft2020 {
		refused = draftRefused
	}
	// Read-only and callable under the validator written: allowing a tool
	// every call of which is refused would be a line that does nothing.
	var readOnly []string
	for name, t := range tools {
		if t.Safety.ReadOnly && !t.Safety.RequiresApproval &&
			!slices.ContainsFunc(refused, func(r upstream.RefusedTool) bool { return r.Name == name }) {
			readOnly = append(readOnly, name)
		}
	}
	slices.Sort(readOnly)
	if len(readOnly) == 0 {
		fmt.Fprintf(out, "no tool of %s says it is read-only (readOnlyHint); allow its tools by name in the policy, each call then needs an approval\n", L(req.srv.Name))
		return nil
	}
	quoted, _ := json.Marshal(readOnly)
	fmt.Fprintf(out, "policy lines that would allow its %d read-only tools (add them to a rule of policy:):\n", len(readOnly))
	fmt.Fprintf(out, "    allow: %s\n", termtext.Line(string(quoted)))
	return nil
}

// entry is a server's configuration entry, as its lines.
type entry struct{ lines []string }

// serverEntry is srv's entry: strings as JSON strings (valid YAML
// double-quoted scalars, every character escaped that needs it).
func serverEntry(srv upstream.Server, validator string) entry {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	e := entry{lines: []string{"- name: " + srv.Name}}
	if srv.URL != "" {
		e.lines = append(e.lines, "  url: "+q(srv.URL))
	} else {
		parts := make([]string, len(srv.Command))
		for i, c := range srv.Command {
			parts[i] = q(c)
		}
		e.lines = append(e.lines, "  command: ["+strings.Join(parts, ", ")+"]")
	}
	e.lines = append(e.lines, "  validator: "+validator+"   # written by backplane servers add: "+validatorMeaning(validator))
	return e
}

func validatorMeaning(v string) string {
	if v == upstream.ValidatorDraft2020 {
		return "schemas checked as JSON Schema 2020-12 in full"
	}
	return "Backplane's schema subset; tools beyond it are refused"
}

// text is the entry with indent before each line, each line ended.
func (e entry) text(indent string) string {
	var b strings.Builder
	for _, l := range e.lines {
		b.WriteString(indent + l + "\n")
	}
	return b.String()
}

var dashLine = regexp.MustCompile(`^(\s*)- `)

// appendServer returns data with e added as the last item of servers:,
// and the line the entry starts on. The YAML node tree says where
// servers: and its last item are; the entry is then spliced into the
// text, so that every other byte stays as it was: re-encoding the tree
// would keep comments but not blank lines, indentation or quoting.
// Without servers:, the key is added at the end of the file.
func appendServer(data []byte, e entry) ([]byte, int, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, 0, err
	}
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var root *yaml.Node
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		root = doc.Content[0]
	}
	var key, val *yaml.Node
	if root != nil {
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == "servers" {
				key, val = root.Content[i], root.Content[i+1]
			}
		}
	}
	insert := func(at int, text string) ([]byte, int) {
		var b bytes.Buffer
		for _, l := range lines[:at] {
			b.WriteString(l)
		}
		if at > 0 && !strings.HasSuffix(lines[at-1], "\n") {
			b.WriteString("\n")
		}
		b.WriteString(text)
		for _, l := range lines[at:] {
			b.WriteString(l)
		}
		return b.Bytes(), at + 1
	}
	switch {
	case key == nil:
		if root == nil && len(bytes.TrimSpace(data)) > 0 && doc.Kind != 0 {
			return nil, 0, fmt.Errorf("the file is not a YAML mapping")
		}
		out, _ := insert(len(lines), "servers:\n")
		lines = strings.SplitAfter(string(out), "\n")
		lines = lines[:len(lines)-1]
		out, at := insert(len(lines), e.text("  "))
		return out, at, nil
	case val.Kind == yaml.ScalarNode && val.Tag == "!!null" && val.Line == key.Line && !strings.Contains(lines[key.Line-1], "~") && !strings.Contains(strings.ToLower(lines[key.Line-1]), "null"):
		// servers: with nothing after it.
		out, at := insert(key.Line, e.text("  "))
		return out, at, nil
	case val.Kind == yaml.SequenceNode && val.Style&yaml.FlowStyle == 0 && len(val.Content) > 0:
		m := dashLine.FindStringSubmatch(lines[val.Content[0].Line-1])
		if m == nil {
			return nil, 0, fmt.Errorf("servers: (line %d): its first item does not start its line with \"- \"", key.Line)
		}
		last := lastLine(val, len(lines))
		out, at := insert(last, e.text(m[1]))
		return out, at, nil
	}
	return nil, 0, fmt.Errorf("servers: (line %d) is not a block sequence (\"- name: ...\" items) that can be added to", key.Line)
}

// lastLine is the last line (1-based) holding part of n: the greatest
// line of any node below it, extended over the lines a multi-line scalar
// spans, but not over the blank and comment lines after it.
func lastLine(n *yaml.Node, max int) int {
	last := n.Line
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		l := n.Line
		if n.Kind == yaml.ScalarNode && (n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 || strings.Contains(n.Value, "\n")) {
			l += strings.Count(n.Value, "\n")
		}
		last = max0(last, l)
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return min(last, max)
}

func max0(a, b int) int {
	if a > b {
		return a
	}
	return b
}
