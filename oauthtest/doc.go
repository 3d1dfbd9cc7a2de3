// Package oauthtest holds the end-to-end tests of Backplane's OAuth client
// to upstream MCP servers (backend/upstream, docs/upstream-auth.md) against
// well-kept authorization servers: ory/fosite with its in-memory storage
// (service, per_caller) and zitadel/oidc's OpenID provider (exchange: RFC
// 8693, which fosite v0.49.0 lacks), and end to end through the built
// backplane binary (e2e_test.go).
// It is a module of its own, test-only, so that the core module does not
// depend on fosite or zitadel.
package oauthtest
