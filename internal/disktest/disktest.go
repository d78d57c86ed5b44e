// Package disktest gives tests a real, small filesystem to fill: a tmpfs
// mounted for the test, so that a store on it runs out of room as it would
// on a full disk, and a file that takes whatever room is left.
package disktest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Tmpfs mounts a tmpfs of size (mount's form: "16m") at a temporary
// directory and returns it; it is unmounted at cleanup. Mounting needs
// root: where it is refused the test is skipped, saying why.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// Fill writes a file at path until its filesystem has no room left; any
// other write error fails the test.
func Fill(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !strings.Contains(err.Error(), "no space left") {
				t.Fatalf("filling the disk: %v", err)
			}
			return
		}
	}
}
