package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/internal/termtext"
)

// refusedServer is one server with refused tools (assemble's report).
type refusedServer = assemble.RefusedServer

// refusedServers reports the configured servers, in configuration order,
// that have refused tools.
func refusedServers(rt *assemble.Runtime) []refusedServer { return rt.RefusedServers() }

// printRefused writes the report for people: per server, the refused
// tools with their keywords, then the line that would accept them. indent
// is put before each line.
func printRefused(w io.Writer, indent string, list []refusedServer) {
	L := termtext.Line
	for _, r := range list {
		fmt.Fprintf(w, "%sserver %s (%s): %d of %d tools refused by validator %s; every call of them fails with unsupported_capability:\n",
			indent, L(r.Server), L(r.Line), len(r.Refused), r.Tools, r.Validator)
		for _, t := range r.Refused {
			if t.Reason != "" {
				fmt.Fprintf(w, "%s  %s: not offered: %s\n", indent, L(t.Name), L(t.Reason))
				continue
			}
			fmt.Fprintf(w, "%s  %s: %s\n", indent, L(t.Name), L(strings.Join(t.Keywords, ", ")))
		}
		if r.FixAccepts > 0 {
			fmt.Fprintf(w, "%s  to accept %d of them, set this line on server %s (%s): %s\n", indent, r.FixAccepts, L(r.Server), L(r.Line), r.Fix)
		}
	}
}
