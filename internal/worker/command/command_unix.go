//go:build unix

package command

import (
	"os/exec"
	"syscall"
)

// ownSession starts the program in a session and process group of its
// own, so that everything it starts can be killed with it: when the call's
// deadline passes or the worker stops (Cancel), and once the program has
// exited (the returned end), so that what it left running in the
// background does not outlive the call. A descendant that makes its own
// session or group (a daemon) escapes; a container or cgroup contains
// those.
func ownSession(cmd *exec.Cmd) (end func()) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return func() {
		if cmd.Process == nil {
			return
		}
		// A group outlives its leader while a member is alive, and Linux
		// hands out no id in use as a group's; ESRCH: none is left.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
