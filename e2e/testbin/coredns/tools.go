//go:build tools

// Package tools pins the CoreDNS server that testbin builds.
package tools

import _ "github.com/coredns/coredns"
