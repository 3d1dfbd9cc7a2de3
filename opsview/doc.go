// Package opsview holds the views front ends (the console, the server's
// health endpoints, the CLI) read of a running gateway: the journal's
// entries and pages, the overview's counts, the health checks and their
// states, an approval request as an operator reviews it (with why it
// needs one), a pin, a budget's use, an accepted definition. The gateway
// fills them (gateway.Gateway's read methods); nothing here reads a
// store. The types are plain data with the few pure functions that
// interpret them (Outcome, ToolReportedError, Healthy, Ready, State,
// CheckState), so that a front end decides nothing the gateway did not.
//
// It imports only the store's record types (store), the tool vocabulary
// (tool) and the policy's parts (policy): never the gateway, a store
// implementation or a backend.
package opsview
