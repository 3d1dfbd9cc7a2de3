package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/tool"
)

func newToolsCmd() *cobra.Command {
	var f gatewayFlags
	cmd := groupCmd("tools", "List the registered tools and accept changed definitions of upstream tools",
		`The tools of upstream MCP servers (the configuration's servers, exposed as
NAME.TOOL) are pinned: the hash of each tool's definition (name,
description, input schema) is recorded the first time it is seen and
accepted. When a server later presents a different definition, the tool is
held: its calls fail with forbidden until an operator reviews the new
definition and accepts it with "backplane tools accept NAME".

These verbs open the configuration, which starts (or connects to) every
upstream server: that is how their current definitions are seen.`)
	addGatewayFlags(cmd, &f)
	cmd.AddCommand(newToolsListCmd(&f), newToolsAcceptCmd(&f))
	return cmd
}

// toolEntry is one tool as "tools list" prints it.
type toolEntry struct {
	Name string `json:"name"`
	// Source is builtin, tools (the configuration's command tools) or
	// "server NAME".
	Source string `json:"source"`
	Pinned bool   `json:"pinned"`
	// Status is accepted or held for a pinned tool, "" otherwise.
	Status         string `json:"status,omitempty"`
	DefinitionHash string `json:"definition_hash"`
	AcceptedHash   string `json:"accepted_hash,omitempty"`
	AcceptedBy     string `json:"accepted_by,omitempty"`
	// Callable is false when every call is refused because of the tool's
	// schema (its validator cannot use it); Refused says why.
	Callable    bool            `json:"callable"`
	Refused     string          `json:"refused,omitempty"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	// Descriptor is an upstream tool's whole descriptor as its server
	// listed it (title, outputSchema, every annotation, ...): all of it is
	// part of the definition hash, so an operator accepting a change sees
	// every member that may have changed.
	Descriptor json.RawMessage `json:"descriptor,omitempty"`
	// OutputSchema is a tool's own output schema (the built-ins'), when it
	// has no descriptor (whose outputSchema member says it).
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Sandbox says how a tool's process is confined (bash, command tools,
	// stdio servers' tools), "" for tools that start none.
	Sandbox string `json:"sandbox,omitempty"`
}

func newToolsListCmd(f *gatewayFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the registered tools, their source and, for upstream tools, whether they are held",
		Long: `List prints every registered tool: its name, where it comes from (builtin,
tools for the configuration's command tools, or "server NAME"), and for the
pinned tools of upstream servers whether the current definition is accepted
or held, with the definition hash (the first 12 hex digits in the text
form), and whether the tool is callable or refused because of its schema,
with the reason (for an upstream tool under validator subset, setting
validator: draft2020-12 on its server may accept it: the log of the start
says how many).

With --json the answer is {"tools":[{"name","source","pinned","status",
"definition_hash","accepted_hash","accepted_by","callable","refused",
"description",
"input_schema","descriptor"}]}: what an operator reviews before accepting
(descriptor: an upstream tool's object as its server listed it, every
member of which is part of the definition). Servers whose
validator refuses some of their tools are listed after the table (in
--json, "refused_by_server"): each refused tool with the keywords at fault,
and the line that accepts them (validator: draft2020-12).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			var entries []toolEntry
			for _, t := range s.rt.Gateway.Tools() {
				_, hash, ok := s.rt.Gateway.Tool(t.Name)
				if !ok {
					continue // unregistered meanwhile (an upstream's catalog changed)
				}
				e := toolEntry{
					Name: t.Name, Source: orDash(t.Source), Pinned: t.Pinned,
					DefinitionHash: hash, Description: t.Description, InputSchema: t.InputSchema, Descriptor: t.Descriptor,
					Callable: true,
				}
				if len(t.Descriptor) == 0 {
					e.OutputSchema = t.OutputSchema
				}
				if err := s.rt.Gateway.Refusal(t.Name); err != nil {
					e.Callable, e.Refused = false, err.Error()
				}
				if t.Pinned {
					pin, err := s.rt.Store.GetPin(cmd.Context(), t.Name)
					if err != nil {
						return fmt.Errorf("reading the pin of %s: %w", t.Name, err)
					}
					e.Status, e.AcceptedHash, e.AcceptedBy = "accepted", pin.AcceptedHash, pin.AcceptedBy
					if pin.AcceptedHash != hash {
						e.Status = "held"
					}
				}
				e.Sandbox = toolSandbox(s.rt, t)
				if len(e.InputSchema) == 0 {
					e.InputSchema = json.RawMessage("null")
				}
				entries = append(entries, e)
			}
			slices.SortFunc(entries, func(a, b toolEntry) int { return strings.Compare(a.Name, b.Name) })
			out := cmd.OutOrStdout()
			if f.asJSON {
				if entries == nil {
					entries = []toolEntry{}
				}
				return writeJSONLine(out, struct {
					Tools   []toolEntry     `json:"tools"`
					Refused []refusedServer `json:"refused_by_server,omitempty"`
				}{entries, refusedServers(s.rt)})
			}
			if len(entries) == 0 {
				_, err := fmt.Fprintln(out, "no tools")
				return err
			}
			defer printRefused(out, "", refusedServers(s.rt)) // after the table
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSOURCE\tSTATUS\tDEFINITION\tACCEPTED\tSANDBOX\tCALLABLE")
			for _, e := range entries {
				status, accepted := "-", "-"
				if e.Pinned {
					status, accepted = e.Status, short(e.AcceptedHash)
					if e.AcceptedBy != "" {
						accepted += " by " + e.AcceptedBy
					}
				}
				callable := "yes"
				if !e.Callable {
					callable = "refused: " + e.Refused
				}
				L := termtext.Line
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", L(e.Name), L(e.Source), L(status), L(short(e.DefinitionHash)), L(accepted), L(orDash(e.Sandbox)), L(callable))
			}
			return tw.Flush()
		},
	}
}

// toolSandbox is the sandbox decision of the process behind t: its own,
// or its server's.
func toolSandbox(rt *assemble.Runtime, t tool.Tool) string {
	if d, ok := rt.Sandbox[t.Name]; ok {
		return d.String()
	}
	if srv, ok := tool.SourceServer(t.Source); ok {
		if d, ok := rt.Sandbox[srv]; ok {
			return d.String()
		}
	}
	return ""
}

func short(hash string) string { return hash[:min(12, len(hash))] }

func newToolsAcceptCmd(f *gatewayFlags) *cobra.Command {
	var as, hash string
	cmd := &cobra.Command{
		Use:   "accept NAME [--as WHO] [--hash H]",
		Short: "Accept the current definition of a held upstream tool",
		Long: `Accept makes the definition of the upstream tool NAME that the gateway sees
now (see "backplane tools list --json") the accepted one: a held tool
becomes callable again. --hash, when given, must be that definition's hash
(as listed), so that what is accepted is what was reviewed. The decision is
recorded as the owner of the operator token (BACKPLANE_OPERATOR_TOKEN or
--operator-token-file), required when the configuration lists operators;
without operators, as WHO (--as; default: the login name). The OS user is
recorded too.

Exit 1, with the reason, when NAME is no registered tool, is not pinned, or
its definition is not the one --hash names.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			as, err := s.operator(as)
			if err != nil {
				return err
			}
			acc, err := s.rt.Gateway.AcceptDefinition(cmd.Context(), name, as, hash)
			var oe *gateway.OperatorError
			if errors.As(err, &oe) {
				return negative(out, f.asJSON, oe.Class, oe.Message)
			}
			if err != nil {
				return err
			}
			current, already := acc.DefinitionHash, acc.AlreadyAccepted
			pin := struct{ AcceptedBy string }{acc.AcceptedBy}
			if f.asJSON {
				return writeJSONLine(out, struct {
					OK              bool   `json:"ok"`
					Tool            string `json:"tool"`
					DefinitionHash  string `json:"definition_hash"`
					AcceptedBy      string `json:"accepted_by"`
					AlreadyAccepted bool   `json:"already_accepted,omitempty"`
				}{true, name, current, map[bool]string{true: pin.AcceptedBy, false: as}[already], already})
			}
			if already {
				_, err = fmt.Fprintf(out, "ok: the definition %s of %s was already accepted\n", short(current), termtext.Line(name))
				return err
			}
			_, err = fmt.Fprintf(out, "ok: %s accepted by %s (definition %s)\n", termtext.Line(name), termtext.Line(as), short(current))
			return err
		},
	}
	addOperatorFlags(cmd, f, &as, "who accepts: with operators configured, only a check of the token's owner (default: the login name)")
	cmd.Flags().StringVar(&hash, "hash", "", "the definition hash that was reviewed (refused if it is not the current one)")
	return cmd
}
