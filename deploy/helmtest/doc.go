// Package helmtest checks the Helm chart deploy/helm/backplane: helm
// lint, and helm template with the default values and with the
// three-replica values of docs/deploy.md, every rendered manifest decoded
// strictly into the Kubernetes API types (an unknown or misplaced field
// fails), and what the chart promises checked on the decoded objects.
//
// It is a module of its own so that k8s.io/api stays out of the core
// module's dependencies; helm itself is pinned in tools/go.mod and run as
// `go tool -modfile=tools/go.mod helm`. It holds only tests.
package helmtest
