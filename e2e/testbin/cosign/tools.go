//go:build tools

// Package tools pins cosign, which signs the released image index and attaches its attestations.
package tools

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
