package upstream

import (
	"context"
	"log/slog"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Parameter headers (2026-07-28, SEP-2243).
//
// A tool may mark properties of its input schema with x-mcp-header: the
// client then mirrors those arguments into Mcp-Param-NAME headers of the
// tools/call request (over streamable HTTP), beside the Mcp-Method and
// Mcp-Name headers every request carries. The SDK's client does all of it:
// it sets the headers from the tool's definition as it last listed it, and
// leaves out of its tools/list result every tool whose annotations are
// invalid (not a non-empty token, on a non-primitive property, or a name
// used twice), as the revision says a client must.
//
// The gateway registers tools from the raw answer (D20), so it leaves out
// what the SDK left out: a tool of the raw page missing from the SDK's
// decoded one is not offered, and the refused-tools report
// (Visibility.RefusedTools) says why. The SDK says why only in its log:
// headerLog keeps what it logged of each tool; a tool it dropped without a
// word gets a reason of the gateway's own.

// keywordHeader is the keyword the refused-tools report names for a tool
// left out because of its parameter headers.
const keywordHeader = "x-mcp-header"

// reasonHeaderDefault is the reason of a dropped tool the SDK said nothing
// about.
const reasonHeaderDefault = "its x-mcp-header annotations are invalid (SEP-2243): a 2026-07-28 client does not offer it"

// headerLog is the SDK client's log handler: it keeps the reason of each
// tool the SDK excluded from tools/list, and drops everything else (the
// SDK's own log was never the gateway's).
type headerLog struct {
	mu      sync.Mutex
	reasons map[string]string
}

// maxHeaderReasons bounds the reasons kept.
const maxHeaderReasons = 10000

func (h *headerLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h *headerLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "excluding tool from tools/list" {
		return nil
	}
	var name, why string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "tool":
			name = a.Value.String()
		case "error":
			why = a.Value.String()
		}
		return true
	})
	if name == "" || why == "" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reasons == nil {
		h.reasons = map[string]string{}
	}
	if _, ok := h.reasons[name]; ok || len(h.reasons) < maxHeaderReasons {
		h.reasons[name] = why
	}
	return nil
}

func (h *headerLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *headerLog) WithGroup(string) slog.Handler      { return h }

// reason is why the SDK excluded the tool named name.
func (h *headerLog) reason(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if why, ok := h.reasons[name]; ok {
		return "its x-mcp-header annotations are invalid (SEP-2243): " + why
	}
	return reasonHeaderDefault
}

// markDropped marks the tools of a raw page that the SDK's decoded page
// (res) left out. Only at 2026-07-28, the revision that defines the
// annotations; res is nil when the SDK could not decode the page, and then
// nothing is marked.
func (u *Upstream) markDropped(l *link, tools []rawTool, res *sdk.ListToolsResult) {
	if !l.modern() || res == nil {
		return
	}
	kept := make(map[string]bool, len(res.Tools))
	for _, t := range res.Tools {
		if t != nil {
			kept[t.Name] = true
		}
	}
	for i := range tools {
		if !kept[tools[i].Name] {
			tools[i].Dropped = u.sdkLog.reason(tools[i].Name)
		}
	}
}
