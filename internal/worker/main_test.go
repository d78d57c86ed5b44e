package worker_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The test binary is also the misbehaving MCP server of
	// TestMCPBrokenSessionFailsItsCallsWithoutRunningThemAgain.
	if mode := os.Getenv(badMCPEnv); mode != "" {
		serveBadMCP(mode, os.Getenv(badMCPMarks))
		return
	}
	goleak.VerifyTestMain(m)
}
