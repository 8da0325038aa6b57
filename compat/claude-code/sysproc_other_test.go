//go:build !linux

package claudecode_test

import "os/exec"

func setProcAttrs(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) error { return cmd.Process.Kill() }
