package assemble

import (
	"fmt"
	"path/filepath"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/console"
)

// RefusedServer is one server whose validator refuses some of its tools,
// as serve's summary, tools list, policy check and the console report it:
// which tools, the keywords at fault, and the exact line that would accept
// them.
type RefusedServer struct {
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

// RefusedServers reports the configured servers, in configuration order,
// that have refused tools.
func (rt *Runtime) RefusedServers() []RefusedServer {
	var out []RefusedServer
	for _, sc := range rt.Config.Servers {
		u, ok := rt.Upstream(sc.Name)
		if !ok {
			continue
		}
		v := u.Visibility()
		if v.Refused() == 0 {
			continue
		}
		out = append(out, RefusedServer{
			Server: v.Server, Line: fmt.Sprintf("%s:%d", filepath.Base(rt.Config.Path), sc.Line),
			Validator: v.Validator, Tools: v.Tools, Refused: v.RefusedTools,
			Fix: v.Fix(), FixAccepts: v.OtherAccepts,
		})
	}
	return out
}

// consoleRefused is the same report as the console shows it on its tools
// and upstreams pages.
func consoleRefused(rt *Runtime) []console.RefusedServer {
	var out []console.RefusedServer
	for _, r := range rt.RefusedServers() {
		cr := console.RefusedServer{Server: r.Server, Line: r.Line, Validator: r.Validator, Tools: r.Tools,
			Fix: r.Fix, FixAccepts: r.FixAccepts}
		for _, t := range r.Refused {
			cr.Refused = append(cr.Refused, console.RefusedTool{Name: t.Name, Keywords: t.Keywords, OtherAccepts: t.OtherAccepts})
		}
		out = append(out, cr)
	}
	return out
}
