//go:build !unix

package mcpexec

import "os/exec"

func newProcessGroup(*exec.Cmd) {}

func killGroup(int) {}
