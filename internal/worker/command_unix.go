//go:build unix

package worker

import (
	"os/exec"
	"syscall"
)

// killProcessGroup makes cancellation kill everything the program started, so
// that a shell script's children do not outlive its deadline.
func killProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
