//go:build unix

package mcpexec

import (
	"os/exec"
	"syscall"
)

// newProcessGroup puts a stdio MCP server in a group of its own, so that
// what it starts (npx starts node) ends with it.
func newProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills what is left of a process group; 0 is no group.
func killGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}
