//go:build tools

// Package tools pins syft, which writes the SPDX SBOM of the operator image's root filesystem.
package tools

import (
	_ "github.com/anchore/syft/cmd/syft"
)
