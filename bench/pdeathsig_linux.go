package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd when the bench dies, as the bench's
// own children do when their stdin closes.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
