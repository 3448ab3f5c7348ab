//go:build tools

// Package tools pins the MinIO server that testbin builds.
package tools

import _ "github.com/minio/minio"
