//go:build tools

// Package tools pins the command this wrapper module builds.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
