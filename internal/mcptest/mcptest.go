// Package mcptest finds the real MCP servers the tests run: the npm servers
// that scripts/ensure-mcp.sh installs into .cache/npm of the repository
// (installing them first when missing), and testdata's crash server. A
// machine without node or npm fails the tests that need them: they never
// skip.
package mcptest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	err  error
)

// root is the repository's root directory.
func root() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("mcptest: cannot tell where the repository is")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

// NodeModules is the node_modules holding the test MCP servers.
func NodeModules(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		var r string
		if r, err = root(); err != nil {
			return
		}
		if _, lerr := exec.LookPath("node"); lerr != nil {
			err = fmt.Errorf("node is not on PATH: the MCP tests need Node.js and npm (make test-deps)")
			return
		}
		out, rerr := exec.Command(filepath.Join(r, "scripts", "ensure-mcp.sh")).CombinedOutput()
		if rerr != nil {
			err = fmt.Errorf("scripts/ensure-mcp.sh: %v\n%s", rerr, out)
			return
		}
		dir = filepath.Join(r, ".cache", "npm", "node_modules")
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Everything is the command of the server-everything stdio server.
func Everything(t testing.TB) []string {
	return []string{"node", filepath.Join(NodeModules(t), "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}
}

// CrashServer is the command and environment of
// internal/worker/testdata/mcp-crash-server.cjs, a server on the TypeScript
// SDK whose "crash" tool exits the process in the middle of the call.
func CrashServer(t testing.TB) (argv, env []string) {
	modules := NodeModules(t)
	r, err := root()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"node", filepath.Join(r, "internal", "worker", "testdata", "mcp-crash-server.cjs")}, []string{"NODE_PATH=" + modules}
}
