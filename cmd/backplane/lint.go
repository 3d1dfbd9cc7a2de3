package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/spf13/cobra"
)

func newSchemaLintCmd() *cobra.Command {
	var (
		asJSON bool
		server string
		f      gatewayFlags
	)
	cmd := &cobra.Command{
		Use:   "lint CATALOG|- | lint --server NAME [--config FILE]",
		Short: "Tell which tools of an MCP tools/list catalog the gateway accepts",
		Long: `Lint reads an MCP tools/list result ({"tools":[{"name","description",
"inputSchema"},...]}) or a bare array of tools, from a file or stdin ("-"),
and checks every tool's inputSchema, byte for byte, as the gateway would at
registration. For each tool it reports ok, or the first error (class,
keyword, schema pointer, message); then a summary: tools in total, inside
and outside the supported subset, and the count of failures per keyword
(per class when the error names no keyword).

A tool entry that is not an object, has no string name, repeats a member or
repeats an earlier tool's name is reported as an error of that entry (stage
"input") and counts as outside.

With --json the report is {"tools":[{"index","name","ok","error"?}],
"summary":{"total","supported","unsupported","by_keyword":{...}}}.

With --server NAME the catalog is listed live from the configuration's
upstream MCP server of that name (its input schemas exactly as the server
sends them), whatever validator the configuration chose for it: the report
says which of its tools the subset accepts.

Exit 0 when every tool is inside the subset, 1 when any is not, 2 when the
catalog cannot be read or is not a tools/list result.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if server != "" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if server != "" {
				data, err = liveCatalog(cmd, &f, server)
			} else {
				data, err = readInput(cmd, args[0], maxCatalogInput+1)
			}
			if err != nil {
				return err
			}
			if len(data) > maxCatalogInput {
				return inputErrorf("catalog is larger than %d bytes", maxCatalogInput)
			}
			report, err := lintCatalog(data)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				err = writeJSONLine(out, report)
			} else {
				err = writeLintText(out, report)
			}
			if err != nil {
				return err
			}
			if report.Summary.Unsupported > 0 {
				return errNegative
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON report instead of text")
	cmd.Flags().StringVar(&server, "server", "", "lint the live catalog of this configured upstream MCP server")
	cmd.Flags().StringVar(&f.configPath, "config", "", "with --server: "+configFlagHelp)
	f.auditLog = os.DevNull // lint makes no calls; keep stdout and stderr for the report
	return cmd
}

// liveCatalog opens the configuration, which connects its upstreams, and
// lists the named server's tools.
func liveCatalog(cmd *cobra.Command, f *gatewayFlags, server string) ([]byte, error) {
	s, err := f.open(cmd.Context(), cmd)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	up, ok := s.rt.Upstream(server)
	if !ok {
		return nil, inputErrorf("%s has no server named %q", f.configPath, server)
	}
	data, err := up.Catalog(cmd.Context())
	if err != nil {
		return nil, &inputError{err}
	}
	return data, nil
}

// lintReport is the --json form of a lint run.
type lintReport struct {
	Tools   []lintEntry `json:"tools"`
	Summary lintSummary `json:"summary"`
}

type lintEntry struct {
	Index int                `json:"index"`
	Name  *string            `json:"name"` // null when the entry has none
	OK    bool               `json:"ok"`
	Error *inputschema.Error `json:"error,omitempty"`
}

type lintSummary struct {
	Total       int            `json:"total"`
	Supported   int            `json:"supported"`
	Unsupported int            `json:"unsupported"`
	ByKeyword   map[string]int `json:"by_keyword"`
}

// lintCatalog checks every tool of a catalog. Its error means the catalog
// itself is unusable (exit 2); a bad tool is a report entry.
func lintCatalog(data []byte) (*lintReport, error) {
	tools, err := catalogTools(data)
	if err != nil {
		return nil, err
	}
	report := &lintReport{Tools: []lintEntry{}, Summary: lintSummary{ByKeyword: map[string]int{}}}
	names := map[string]bool{}
	for i, raw := range tools {
		entry := lintTool(i, raw, names)
		report.Tools = append(report.Tools, entry)
		report.Summary.Total++
		if entry.OK {
			report.Summary.Supported++
			continue
		}
		report.Summary.Unsupported++
		key := entry.Error.Keyword
		if key == "" {
			key = string(entry.Error.Class)
		}
		report.Summary.ByKeyword[key]++
	}
	return report, nil
}

// catalogTools finds the tool list: the "tools" member of a tools/list
// result (other members, such as nextCursor, are ignored), or a bare array.
func catalogTools(data []byte) ([]json.RawMessage, error) {
	if err := checkJSON(data); err != nil {
		return nil, inputErrorf("catalog is %v", err)
	}
	switch jsonKind(data) {
	case '[':
		tools, err := arrayElements(data)
		if err != nil {
			return nil, inputErrorf("catalog is %v", err)
		}
		return tools, nil
	case '{':
		members, err := objectMembers(data)
		if err != nil {
			return nil, inputErrorf("catalog is %v", err)
		}
		var toolsRaw json.RawMessage
		for _, m := range members {
			if m.name != "tools" {
				continue
			}
			if toolsRaw != nil {
				return nil, inputErrorf(`catalog has more than one "tools" member`)
			}
			toolsRaw = m.raw
		}
		if toolsRaw == nil {
			return nil, inputErrorf(`catalog has no "tools" member; expected a tools/list result or an array of tools`)
		}
		tools, err := arrayElements(toolsRaw)
		if err != nil {
			return nil, inputErrorf(`catalog's "tools" is %v`, err)
		}
		return tools, nil
	}
	return nil, inputErrorf("catalog is %s; expected a tools/list result or an array of tools", describeKind(jsonKind(data)))
}

// lintTool checks one tool entry; names collects the names seen so far.
func lintTool(index int, raw json.RawMessage, names map[string]bool) lintEntry {
	entry := lintEntry{Index: index}
	fail := func(msg string) lintEntry {
		entry.Error = &inputschema.Error{
			Class:   inputschema.ClassValidation,
			Stage:   stageInput,
			Message: msg,
			Details: map[string]any{"index": index},
		}
		return entry
	}
	members, err := objectMembers(raw)
	if err != nil {
		return fail("tool entry is " + err.Error())
	}
	var nameRaw, schemaRaw json.RawMessage
	seen := map[string]bool{}
	for _, m := range members {
		if seen[m.name] {
			return fail(fmt.Sprintf("tool entry has a duplicate member %q", m.name))
		}
		seen[m.name] = true
		switch m.name {
		case "name":
			nameRaw = m.raw
		case "inputSchema":
			schemaRaw = m.raw
		}
	}
	if nameRaw != nil {
		if v, err := jsonstrict.Decode(nameRaw, nil); err == nil {
			if s, ok := v.(string); ok {
				entry.Name = &s
			}
		}
	}
	switch {
	case nameRaw == nil:
		return fail("tool entry has no name")
	case entry.Name == nil:
		return fail("tool name is not a strict JSON string")
	case *entry.Name == "":
		return fail("tool name is empty")
	case names[*entry.Name]:
		return fail(fmt.Sprintf("tool name %q repeats an earlier tool's name", *entry.Name))
	}
	names[*entry.Name] = true
	if schemaRaw == nil {
		// A missing schema is the validator's verdict (D4), not a catalog
		// fault: ask it, as the gateway would.
		_, err = inputschema.CompileValue(nil, nil)
	} else {
		_, err = inputschema.Compile(schemaRaw, nil)
	}
	if err == nil {
		entry.OK = true
		return entry
	}
	e, convErr := asSchemaError(err)
	if convErr != nil {
		return fail(convErr.Error())
	}
	entry.Error = wireError(e)
	return entry
}

// writeLintText writes the human form of a lint report.
func writeLintText(out io.Writer, report *lintReport) error {
	bw := bufio.NewWriter(out) // keeps the first write error for Flush
	w := io.Writer(bw)
	for _, t := range report.Tools {
		name := "(tool #" + strconv.Itoa(t.Index) + ", no name)"
		if t.Name != nil {
			name = strconv.Quote(*t.Name)
			if unquoted := *t.Name; strconv.Quote(unquoted) == `"`+unquoted+`"` {
				name = unquoted // plain names need no quotes
			}
		}
		if t.OK {
			fmt.Fprintf(w, "ok    %s\n", name)
			continue
		}
		e := t.Error
		what := string(e.Class)
		if e.Keyword != "" {
			what += ", keyword " + e.Keyword
		}
		fmt.Fprintf(w, "FAIL  %s: %s\n", name, what)
		if e.Stage != stageInput {
			fmt.Fprintf(w, "        schema pointer: %s\n", displayPointer(e.SchemaPointer))
		}
		fmt.Fprintf(w, "        %s\n", e.Message)
	}
	s := report.Summary
	fmt.Fprintf(w, "\n%s: %d inside the supported subset, %d outside\n", plural(s.Total, "tool"), s.Supported, s.Unsupported)
	if len(s.ByKeyword) > 0 {
		fmt.Fprintln(w, "outside, by keyword (or class):")
		keys := make([]string, 0, len(s.ByKeyword))
		for k := range s.ByKeyword {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		width := 0
		for _, k := range keys {
			width = max(width, len(k))
		}
		for _, k := range keys {
			fmt.Fprintf(w, "  %-*s %d\n", width, k, s.ByKeyword[k])
		}
	}
	return bw.Flush()
}
