//go:build tools

// Package tools pins the local-path provisioner that testbin builds.
package tools

import _ "github.com/rancher/local-path-provisioner"
