//go:build !linux

package main

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; elsewhere a killed
// bench leaves ctxproxy running.
func dieWithParent(cmd *exec.Cmd) {}
