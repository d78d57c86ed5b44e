package scripts_test

import (
	"bytes"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// make run with one of its ports taken says which port and how to choose
// another, before it starts anything (it printed "its log:" and an empty
// log).
func TestRunRefusesATakenPort(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	free.Close()
	takenAddr := taken.Addr().String()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)

	for _, tc := range []struct{ name, http, nats, want string }{
		{"http", takenAddr, freeAddr, "HTTP=" + takenAddr},
		{"nats", freeAddr, takenAddr, "NATS_LISTEN=" + takenAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.CommandContext(t.Context(), "bash", "run.sh")
			cmd.Env = append(cmd.Environ(), "HTTP="+tc.http, "NATS_LISTEN="+tc.nats, "RUN_DIR="+dir)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			msg := stderr.String()
			if err == nil {
				t.Fatalf("run.sh succeeded with port %s taken", port)
			}
			if !strings.Contains(msg, "port "+port+" ("+tc.want+") is already in use") || !strings.Contains(msg, "make run ") {
				t.Errorf("stderr = %q, want it to name port %s as %s and how to choose another", msg, port, tc.want)
			}
			if strings.Contains(msg, "its log") || strings.Contains(msg, "orchestrator") {
				t.Errorf("stderr = %q: started something before checking its ports", msg)
			}
		})
	}
}

// APPROVER is policy or none; anything else is refused before anything
// starts, saying what it takes.
func TestRunRefusesAnUnknownApprover(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), "bash", "run.sh")
	cmd.Env = append(cmd.Environ(), "APPROVER=human", "RUN_DIR="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("run.sh succeeded with APPROVER=human")
	}
	if msg := stderr.String(); !strings.Contains(msg, "APPROVER=human") || !strings.Contains(msg, "none") || strings.Contains(msg, "orchestrator") {
		t.Errorf("stderr = %q, want it to refuse APPROVER=human, name the choices and start nothing", msg)
	}
}
