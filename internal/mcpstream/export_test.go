package mcpstream

import (
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ReadsDirectly reports whether c's Read reads the stream itself (no
// reading goroutine).
func ReadsDirectly(c mcp.Connection) bool { return c.(*conn).direct != nil }

// ScanID runs the shallow scan of salvage.go over line: the id it
// recovers, whether it saw a method, and whether the line is torn.
func ScanID(line []byte) (id jsonrpc.ID, ok, method, torn bool) {
	var s idScan
	s.feed(line)
	id, ok = s.id()
	return id, ok, s.method, s.framingBroken()
}
