package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/schematool"
)

func newSchemaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Check tool input schemas and validate tool arguments",
		Long: `The schema verbs apply the gateway's tool input schema contract: the
supported JSON Schema subset, checked in full before any argument is looked
at, and strict JSON decoding of schemas and arguments.`,
		// A group with a RunE of its own, so that an unknown verb is a usage
		// error (exit 2) instead of a help page with exit 0.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newSchemaCheckCmd(), newSchemaValidateCmd(), newSchemaLintCmd())
	return cmd
}

// Bounds on what a verb reads into memory. A document over the validator's
// own limit is still read one byte past it, so that the validator, not this
// command, reports it (as a validation error, the gateway's answer).
const (
	maxSchemaInput    = inputschema.DefaultMaxSchemaBytes + 1
	maxArgumentsInput = inputschema.DefaultMaxArgumentBytes + 1
)

// readInput reads a file, or stdin for "-", up to limit bytes.
func readInput(cmd *cobra.Command, name string, limit int64) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = cmd.InOrStdin()
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, &inputError{err}
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, limit))
	if err != nil {
		if name == "-" {
			return nil, inputErrorf("reading stdin: %v", err)
		}
		return nil, &inputError{err}
	}
	return data, nil
}

func newSchemaCheckCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check FILE|-",
		Short: "Tell whether a tool input schema is inside the supported subset",
		Long: `Check reads one tool input schema (a file, or stdin for "-") and compiles
it as the gateway does at tool registration. Exit 0 when the schema is inside
the supported subset; exit 1 with the first error (class, message, schema
pointer, keyword) when it is not.

With --json the answer is {"ok":true} or the error object: class, stage,
message, path, pointer, schema_pointer, keyword, details.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := readInput(cmd, args[0], maxSchemaInput)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			_, err = inputschema.Compile(data, nil)
			if err == nil {
				if asJSON {
					return writeJSONLine(out, okReport{OK: true})
				}
				_, werr := fmt.Fprintln(out, "ok: schema is inside the supported subset")
				return werr
			}
			e, err := schematool.SchemaError(err)
			if err != nil {
				return err
			}
			if asJSON {
				if werr := writeJSONLine(out, schematool.Wire(e)); werr != nil {
					return werr
				}
				return errNegative
			}
			fmt.Fprintln(out, verdictHeadline(e))
			writeErrorFields(out, "  ", e)
			return errNegative
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object instead of text")
	return cmd
}

func newSchemaValidateCmd() *cobra.Command {
	var (
		schemaFile, argsFile, configPath string
		asJSON, batch                    bool
	)
	cmd := &cobra.Command{
		Use:   "validate --schema FILE --args FILE|-  |  validate --batch",
		Short: "Validate tool arguments against a tool input schema",
		Long: `Validate compiles a schema and validates one argument document against it,
as the gateway does for every tool call: strict JSON decoding of the
arguments, then every constraint. All violations are listed. Exit 0 when the
arguments are valid, 1 when the schema or the arguments are not.

With --json the answer is {"ok":true} or {"ok":false,"errors":[...]}, each
error an object with class, stage, message, path, pointer, schema_pointer,
keyword and details; a schema outside the subset is a single error with
stage "schema".

With --batch, JSON Lines are read on stdin and one JSON line is written per
input line, in order:

  in:  {"id":..., "schema":{...} | "schema_text":"...",
        "arguments":{...} | "arguments_text":"..."}
  out: {"id":...,"ok":true}
       {"id":...,"ok":false,"error":{class,stage,message,path,pointer,
                                     schema_pointer,keyword,details}}

"schema" and "arguments" are handed to the validator byte for byte;
"schema_text" and "arguments_text" are JSON strings whose decoded text is
handed over instead, for documents that are not valid JSON. "id" is
optional and echoed (null when absent). Each line reports the first error
only. A line that is not a JSON object, that has both or neither of schema
and schema_text (or of arguments and arguments_text), a duplicate or unknown
member, or more than 16 MiB, gets an error with stage "input" and class
"validation", and processing goes on. Blank lines are skipped (they produce
no output line). Identical schema texts are compiled once per run. The exit
code is 0 once every line is processed, whatever the verdicts.

With --config FILE, schemas and arguments are checked under that
configuration's limits (limits.max_argument_bytes), as its gateway checks
them; without it, under the defaults.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var limits inputschema.Limits
			if configPath != "" {
				cfg, err := config.Load(configPath)
				if err != nil {
					return &inputError{err}
				}
				limits = cfg.Limits.Schema()
			}
			if batch {
				if schemaFile != "" || argsFile != "" {
					return errors.New("--batch reads schemas and arguments from stdin; do not combine it with --schema or --args")
				}
				cache := schematool.NewCache(&schematool.Options{Limits: limits}, nil)
				err := schematool.RunBatch(cmd.InOrStdin(), cmd.OutOrStdout(), cache)
				if errors.Is(err, schematool.ErrIO) {
					return &inputError{err}
				}
				return err
			}
			if schemaFile == "" || argsFile == "" {
				return errors.New("both --schema and --args are required (or use --batch)")
			}
			if schemaFile == "-" && argsFile == "-" {
				return errors.New("--schema and --args cannot both read stdin")
			}
			return validateOne(cmd, schemaFile, argsFile, asJSON, limits)
		},
	}
	cmd.Flags().StringVar(&schemaFile, "schema", "", "schema file (- for stdin)")
	cmd.Flags().StringVar(&argsFile, "args", "", "arguments file (- for stdin)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object instead of text (--batch always writes JSON)")
	cmd.Flags().BoolVar(&batch, "batch", false, "read JSON Lines requests on stdin, write one JSON line each")
	cmd.Flags().StringVar(&configPath, "config", "", "check under this configuration's limits (default: the built-in limits)")
	return cmd
}

// validateOne is "schema validate" for one schema and one argument document.
func validateOne(cmd *cobra.Command, schemaFile, argsFile string, asJSON bool, limits inputschema.Limits) error {
	schemaData, err := readInput(cmd, schemaFile, maxSchemaInput)
	if err != nil {
		return err
	}
	// One byte past the limit, so that the validator reports an oversized
	// document (as a validation error, the gateway's answer).
	maxArgs := int64(maxArgumentsInput)
	if limits.MaxArgumentBytes > 0 {
		maxArgs = int64(limits.MaxArgumentBytes) + 1
	}
	argsData, err := readInput(cmd, argsFile, maxArgs)
	if err != nil {
		return err
	}
	var list *inputschema.ErrorList
	schema, err := inputschema.Compile(schemaData, &inputschema.CompileOptions{Limits: limits})
	if err != nil {
		e, err := schematool.SchemaError(err)
		if err != nil {
			return err
		}
		list = &inputschema.ErrorList{Errors: []*inputschema.Error{e}}
	} else if err := schema.ValidateJSONAll(argsData); err != nil {
		if !errors.As(err, &list) {
			e, err := schematool.SchemaError(err)
			if err != nil {
				return err
			}
			list = &inputschema.ErrorList{Errors: []*inputschema.Error{e}}
		}
	}
	out := cmd.OutOrStdout()
	if list == nil {
		if asJSON {
			return writeJSONLine(out, okReport{OK: true})
		}
		_, err := fmt.Fprintln(out, "ok: arguments are valid")
		return err
	}
	if asJSON {
		report := validateReport{OK: false, Errors: make([]*inputschema.Error, len(list.Errors)), Truncated: list.Truncated}
		for i, e := range list.Errors {
			report.Errors[i] = schematool.Wire(e)
		}
		if err := writeJSONLine(out, report); err != nil {
			return err
		}
		return errNegative
	}
	if first := list.Errors[0]; first.Stage == inputschema.StageSchema {
		// The schema fails every call: one error, nothing else to list.
		fmt.Fprintln(out, verdictHeadline(first))
		writeErrorFields(out, "  ", first)
		return errNegative
	}
	fmt.Fprintf(out, "invalid: %s\n", plural(len(list.Errors), "violation"))
	for i, e := range list.Errors {
		fmt.Fprintf(out, "violation %d of %d:\n", i+1, len(list.Errors))
		writeErrorFields(out, "  ", e)
	}
	if list.Truncated {
		fmt.Fprintln(out, "(more violations not listed)")
	}
	return errNegative
}

// okReport is the --json answer of a positive verdict.
type okReport struct {
	OK bool `json:"ok"`
}

// validateReport is the --json answer of a negative "schema validate".
type validateReport struct {
	OK        bool                 `json:"ok"`
	Errors    []*inputschema.Error `json:"errors"`
	Truncated bool                 `json:"truncated,omitempty"`
}

// writeJSONLine writes v as one line of JSON, without HTML escaping so that
// messages stay readable.
func writeJSONLine(w io.Writer, v any) error {
	// encoding/json writes DEL, C1 and format characters raw: escaped
	// here, the same JSON value prints safely on a terminal.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(termtext.JSON(buf.Bytes()))
	return err
}

// verdictHeadline is the first line of a negative schema verdict.
func verdictHeadline(e *inputschema.Error) string {
	if e.Class == inputschema.ClassUnsupported {
		return "unsupported: the schema is outside the supported subset"
	}
	if e.Stage == inputschema.StageSchema {
		return "invalid: the schema is not a valid schema"
	}
	return "invalid: the arguments do not satisfy the schema"
}

// writeErrorFields writes every field of e that says something, one per line.
func writeErrorFields(w io.Writer, indent string, e *inputschema.Error) {
	field := func(label, value string) {
		fmt.Fprintf(w, "%s%-15s %s\n", indent, label+":", termtext.Line(value))
	}
	field("class", string(e.Class))
	field("stage", string(e.Stage))
	field("message", e.Message)
	if e.Path != "" {
		field("path", e.Path)
		field("pointer", displayPointer(e.Pointer))
	}
	field("schema pointer", displayPointer(e.SchemaPointer))
	if e.Keyword != "" {
		field("keyword", e.Keyword)
	}
	if len(e.Details) > 0 {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if enc.Encode(e.Details) == nil {
			field("details", strings.TrimSuffix(b.String(), "\n"))
		}
	}
}

// displayPointer shows the empty pointer, the document root, visibly.
func displayPointer(p string) string {
	if p == "" {
		return `"" (root)`
	}
	return p
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
