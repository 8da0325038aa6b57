package main

import (
	"os/exec"
	"syscall"
)

// setParentDeath makes the child get SIGTERM if the harness dies first.
func setParentDeath(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
