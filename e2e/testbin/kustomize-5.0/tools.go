//go:build tools

// Package tools pins the kustomize 5.0 command that testbin builds.
package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
