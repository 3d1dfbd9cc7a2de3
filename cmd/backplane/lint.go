package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/schematool"
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
registration. For each tool it reports ok, or every error (class, keyword,
schema pointer, message: every unsupported keyword of every schema object,
and the first other error of each), the first being the one the gateway
reports; then a summary: tools in total, inside and outside the supported
subset, and the count of failing tools per keyword of their first error
(per class when the error names no keyword).

A tool entry that is not an object, has no string name, repeats a member or
repeats an earlier tool's name is reported as an error of that entry (stage
"input") and counts as outside.

With --json the report is {"tools":[{"index","name","ok","error"?,"errors"?,
"truncated"?}],
"summary":{"total","supported","unsupported","by_keyword":{...}}}.

With --server NAME the catalog is listed live from the configuration's
upstream MCP server of that name (its input schemas exactly as the server
sends them), whatever validator the configuration chose for it: the report
says which of its tools the subset accepts, under the configuration's limits.

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
			opts := &schematool.Options{}
			if server != "" {
				data, err = liveCatalog(cmd, &f, server, opts)
			} else {
				data, err = readInput(cmd, args[0], schematool.MaxCatalogBytes+1)
			}
			if err != nil {
				return err
			}
			report, err := schematool.Lint(data, opts)
			if errors.Is(err, schematool.ErrCatalog) {
				return &inputError{err}
			}
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
// lists the named server's tools; opts gets the configuration's limits.
func liveCatalog(cmd *cobra.Command, f *gatewayFlags, server string, opts *schematool.Options) ([]byte, error) {
	s, err := f.open(cmd.Context(), cmd)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	opts.Limits = s.rt.Config.Limits.Schema()
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

// writeLintText writes the human form of a lint report.
func writeLintText(out io.Writer, report *schematool.LintReport) error {
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
		errs := t.Errors
		if len(errs) == 0 {
			errs = []*inputschema.Error{t.Error}
		}
		for i, e := range errs {
			what := string(e.Class)
			if e.Keyword != "" {
				what += ", keyword " + e.Keyword
			}
			if i == 0 {
				fmt.Fprintf(w, "FAIL  %s: %s\n", name, what)
			} else {
				fmt.Fprintf(w, "      and: %s\n", what)
			}
			if e.Stage != schematool.StageInput {
				fmt.Fprintf(w, "        schema pointer: %s\n", displayPointer(e.SchemaPointer))
			}
			fmt.Fprintf(w, "        %s\n", termtext.Line(e.Message))
		}
		if t.Truncated {
			fmt.Fprintf(w, "      (more errors not listed)\n")
		}
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
