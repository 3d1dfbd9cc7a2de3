// Package oauthtest holds the end-to-end tests of Backplane's OAuth client
// to upstream MCP servers (backend/upstream, docs/upstream-auth.md) against a
// well-kept authorization server, ory/fosite with its in-memory storage.
// It is a module of its own, test-only, so that the core module does not
// depend on fosite.
package oauthtest
