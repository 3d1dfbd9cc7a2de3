package main

import "github.com/modelcontextprotocol/go-sdk/mcp"

// sessionEra makes a Go SDK client (v1.8.0 tries 2026-07-28 first, without
// a session) initialize a 2025-11-25 session: the tests written for that
// revision's sessions (subscriptions, resumption, session budgets) use it.
var sessionEra = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
