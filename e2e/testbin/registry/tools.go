//go:build tools

// Package tools pins the OCI registry (distribution) that testbin builds.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
