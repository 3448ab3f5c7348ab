//go:build tools

// Package tools pins the Prometheus commands that testbin builds: the server (its API,
// without the web UI assets) and promtool for rule checks and rule unit tests.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
