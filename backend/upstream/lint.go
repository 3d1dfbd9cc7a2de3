package upstream

import (
	"context"
	"encoding/json"
	"fmt"
)

// Catalog lists the server's tools now, live, as a tools/list result
// ({"tools":[{"name","description","inputSchema"}]}) whose input schemas are
// the bytes the server sent: what `backplane schema lint --server` checks.
func (u *Upstream) Catalog(ctx context.Context) ([]byte, error) {
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	tools, err := u.listTools(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	out := []byte(`{"tools":[`)
	first := true
	for _, t := range tools {
		if t.Dropped != "" {
			continue // not offered (headers.go)
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		name, _ := json.Marshal(t.Name)
		desc, _ := json.Marshal(t.Description)
		out = append(out, `{"name":`...)
		out = append(out, name...)
		out = append(out, `,"description":`...)
		out = append(out, desc...)
		if len(t.InputSchema) > 0 {
			out = append(out, `,"inputSchema":`...)
			out = append(out, t.InputSchema...)
		}
		out = append(out, '}')
	}
	return append(out, "]}"...), nil
}
