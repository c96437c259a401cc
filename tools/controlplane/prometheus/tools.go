//go:build tools

// Package tools pins the command this wrapper module builds.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
