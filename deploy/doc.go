// Package deploy holds the deployment files (the Helm chart, Prometheus'
// configuration) and, in deploy/helm, the Go tests that prove the chart.
// It is a Go module of its own so that Helm and the Kubernetes API types
// never enter the proxy's go.mod; `go test ./...` at the repository root
// does not descend into it. Run its tests with `cd deploy && go test ./...`
// (.ci/run does).
package deploy
