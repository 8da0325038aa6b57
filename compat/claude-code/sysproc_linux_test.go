package claudecode_test

import (
	"os/exec"
	"syscall"
)

// setProcAttrs puts the child in its own process group (so a timeout kills
// what Claude Code's Bash tool started too) and has it get SIGKILL if the
// test binary dies first, say at go test's -timeout.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the process group of a child started with setProcAttrs.
func killGroup(cmd *exec.Cmd) error {
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
