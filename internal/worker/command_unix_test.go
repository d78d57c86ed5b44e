//go:build linux

package worker_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// A program that puts a child in the background and exits does not leave
// it running past the call: the worker kills the program's process group
// once the program has ended. Before, the child ran on.
func TestCommandKillsWhatTheProgramLeftBehind(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The child's output goes elsewhere, so the call ends as soon as the
	// program does; its session must be the program's, not the worker's.
	cmd := &worker.Command{Argv: []string{script(t, `sleep 300 >/dev/null 2>&1 </dev/null &
echo $! > `+pidFile+`
echo '"left a child"'`)}}
	got, err := cmd.Execute(t.Context(), callRequest("bg", `{}`))
	if err != nil || got.Outcome != wire.OutcomeReturn {
		t.Fatalf("Execute = %+v, %v", got, err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if st := stat(pid); st != nil && st[3] == stat(os.Getpid())[3] {
		t.Errorf("the program's child is in the worker's session %s", st[3])
	}
	bustest.Poll(t, bustest.Timeout, fmt.Sprintf("the background child %d gone", pid), func() (bool, string) {
		st := stat(pid)
		// A zombie waiting for its reaper has exited.
		return st == nil || st[0] == "Z", fmt.Sprint(st)
	})
}

// stat is the fields of /proc/<pid>/stat after the command name (state,
// ppid, pgrp, session, …); nil if there is no such process.
func stat(pid int) []string {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 4 {
		return nil
	}
	return f
}
