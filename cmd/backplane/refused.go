package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/internal/termtext"
)

// refusedServer is one server whose validator refuses some of its tools,
// as serve's summary, tools list and policy check report it: which tools,
// the keywords at fault, and the exact line that would accept them.
type refusedServer struct {
	Server    string `json:"server"`
	Line      string `json:"line"` // FILE:LINE of the server's entry
	Validator string `json:"validator"`
	Tools     int    `json:"tools"`
	// Refused is every refused tool with its keywords.
	Refused []upstream.RefusedTool `json:"refused"`
	// Fix is the line to set on the server ("validator: draft2020-12"),
	// and FixAccepts how many of the refused tools it would accept.
	Fix        string `json:"fix"`
	FixAccepts int    `json:"fix_accepts"`
}

// refusedServers reports the configured servers, in configuration order,
// that have refused tools.
func refusedServers(rt *assemble.Runtime) []refusedServer {
	var out []refusedServer
	for _, sc := range rt.Config.Servers {
		u, ok := rt.Upstream(sc.Name)
		if !ok {
			continue
		}
		v := u.Visibility()
		if v.Refused() == 0 {
			continue
		}
		out = append(out, refusedServer{
			Server: v.Server, Line: fmt.Sprintf("%s:%d", filepath.Base(rt.Config.Path), sc.Line),
			Validator: v.Validator, Tools: v.Tools, Refused: v.RefusedTools,
			Fix: v.Fix(), FixAccepts: v.OtherAccepts,
		})
	}
	return out
}

// printRefused writes the report for people: per server, the refused
// tools with their keywords, then the line that would accept them. indent
// is put before each line.
func printRefused(w io.Writer, indent string, list []refusedServer) {
	L := termtext.Line
	for _, r := range list {
		fmt.Fprintf(w, "%sserver %s (%s): %d of %d tools refused by validator %s; every call of them fails with unsupported_capability:\n",
			indent, L(r.Server), L(r.Line), len(r.Refused), r.Tools, r.Validator)
		for _, t := range r.Refused {
			fmt.Fprintf(w, "%s  %s: %s\n", indent, L(t.Name), L(strings.Join(t.Keywords, ", ")))
		}
		if r.FixAccepts > 0 {
			fmt.Fprintf(w, "%s  to accept %d of them, set this line on server %s (%s): %s\n", indent, r.FixAccepts, L(r.Server), L(r.Line), r.Fix)
		}
	}
}
