package server

import (
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/tool"
)

// A served page is a list result (tools/list, prompts/list,
// resources/list, resources/templates/list) whose items are written from
// their sources' own descriptors where there is one (an upstream's object
// as it sent it; for a tool, only the name rewritten), and from the SDK's
// types otherwise. The SDK's types have no member for what they do not
// know (a tool's execution, annotation hints yet to come) and leave out
// zero values ("required": false). The page embeds the SDK's own result,
// whose methods, unexported ones included, it thereby has: what the SDK
// sets on a result (resultType under newer protocol versions, cache
// hints) is set on it and written as the SDK writes it.
type (
	servedToolsPage struct {
		*mcp.ListToolsResult
		items servedItems
	}
	servedPrompts struct {
		*mcp.ListPromptsResult
		items servedItems
	}
	servedResources struct {
		*mcp.ListResourcesResult
		items servedItems
	}
	servedTemplates struct {
		*mcp.ListResourceTemplatesResult
		items servedItems
	}
)

// servedItems are the member holding a page's items and, per item, its
// descriptor (nil: the SDK's writing of it).
type servedItems struct {
	member string
	served []json.RawMessage
}

func (p *servedToolsPage) MarshalJSON() ([]byte, error) { return p.items.marshal(p.ListToolsResult) }
func (p *servedPrompts) MarshalJSON() ([]byte, error)   { return p.items.marshal(p.ListPromptsResult) }
func (p *servedResources) MarshalJSON() ([]byte, error) {
	return p.items.marshal(p.ListResourcesResult)
}
func (p *servedTemplates) MarshalJSON() ([]byte, error) {
	return p.items.marshal(p.ListResourceTemplatesResult)
}

// descriptorSource is a ContentSource that has its items' own bytes
// (backend/upstream's Content).
type descriptorSource interface {
	Descriptor(method, key string) (json.RawMessage, bool)
}

// servedTools wraps res, whose Tools describe tools (in order).
func servedTools(res *mcp.ListToolsResult, tools []tool.Tool) mcp.Result {
	served := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		served[i], _ = tool.Served(t)
	}
	items := servedItems{"tools", served}
	if !items.any() {
		return res
	}
	return &servedToolsPage{res, items}
}

// servedContent wraps a content list res whose items have keys (in order),
// from src's descriptors when it has them.
func servedContent(res mcp.Result, src ContentSource, method, member string, keys []string) mcp.Result {
	ds, ok := src.(descriptorSource)
	if !ok {
		return res
	}
	items := servedItems{member, make([]json.RawMessage, len(keys))}
	for i, k := range keys {
		items.served[i], _ = ds.Descriptor(method, k)
	}
	if !items.any() {
		return res
	}
	switch r := res.(type) {
	case *mcp.ListPromptsResult:
		return &servedPrompts{r, items}
	case *mcp.ListResourcesResult:
		return &servedResources{r, items}
	case *mcp.ListResourceTemplatesResult:
		return &servedTemplates{r, items}
	}
	return res
}

// any reports whether some item has a descriptor.
func (p servedItems) any() bool {
	for _, d := range p.served {
		if d != nil {
			return true
		}
	}
	return false
}

// marshal writes the SDK's page res with each item that has a descriptor
// replaced by it.
func (p servedItems) marshal(res any) ([]byte, error) {
	page, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	limits := &jsonstrict.Options{MaxDepth: 10000, MaxBytes: 1 << 30}
	ms, err := jsonstrict.Members(page, limits)
	if err != nil {
		return nil, err
	}
	out := []byte{'{'}
	wrote := false
	for _, m := range ms {
		if len(out) > 1 {
			out = append(out, ',')
		}
		k, _ := json.Marshal(m.Name)
		out = append(out, k...)
		out = append(out, ':')
		if m.Name != p.member {
			out = append(out, m.Raw...)
			continue
		}
		var items []json.RawMessage
		if err := json.Unmarshal(m.Raw, &items); err != nil || len(items) != len(p.served) {
			return nil, errors.New("server: the SDK's list page does not hold the items served")
		}
		wrote = true
		out = append(out, '[')
		for i, it := range items {
			if i > 0 {
				out = append(out, ',')
			}
			if p.served[i] != nil {
				it = p.served[i]
			}
			out = append(out, it...)
		}
		out = append(out, ']')
	}
	if !wrote {
		return nil, errors.New("server: the SDK's list page has no " + p.member + " member")
	}
	return append(out, '}'), nil
}
