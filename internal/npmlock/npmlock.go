// Package npmlock reads which version of an npm package a folder's
// package-lock.json pins and which one its node_modules holds, so the node
// compat suites run npm ci only when node_modules is missing or stale.
package npmlock

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Pinned is the version of pkg (e.g. "@anthropic-ai/sdk") that
// dir/package-lock.json pins, "" if it pins none.
func Pinned(dir, pkg string) (string, error) {
	path := filepath.Join(dir, "package-lock.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return lock.Packages["node_modules/"+pkg].Version, nil
}

// Installed is the version of pkg in dir/node_modules, "" if it is not
// installed there.
func Installed(dir, pkg string) string {
	var p struct{ Version string }
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", filepath.FromSlash(pkg), "package.json"))
	if err != nil || json.Unmarshal(b, &p) != nil {
		return ""
	}
	return p.Version
}
