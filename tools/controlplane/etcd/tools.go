//go:build tools

// Package tools pins the command this wrapper module builds.
package tools

import _ "go.etcd.io/etcd/server/v3"
