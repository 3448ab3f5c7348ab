//go:build tools

// Package tools pins crane, which pushes an OCI image archive to a registry.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
)
