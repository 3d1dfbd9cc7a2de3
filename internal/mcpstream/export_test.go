package mcpstream

import "github.com/modelcontextprotocol/go-sdk/mcp"

// ReadsDirectly reports whether c's Read reads the stream itself (no
// reading goroutine).
func ReadsDirectly(c mcp.Connection) bool { return c.(*conn).direct != nil }
