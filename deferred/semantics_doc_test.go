package deferred_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docs/semantics.md writes out every rule the code cites: one anchored
// heading per rule, D1 to D37 in order, and no rule number cited in the
// Go code or the other docs that it lacks.
func TestSemanticsDocHasEveryRule(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/semantics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	heads := regexp.MustCompile(`(?m)^<a id="d(\d+)"></a>\n### D(\d+) — \S`).FindAllStringSubmatch(doc, -1)
	const rules = 37
	if len(heads) != rules {
		t.Fatalf("%d anchored rule headings, want %d", len(heads), rules)
	}
	for i, h := range heads {
		if want := strconv.Itoa(i + 1); h[1] != want || h[2] != want {
			t.Errorf("heading %d is anchor d%s, D%s; want d%s, D%s", i+1, h[1], h[2], want, want)
		}
	}
	cited := regexp.MustCompile(`\bD(\d{1,3})\b`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range cited.FindAllStringSubmatch(string(src), -1) {
			if n, _ := strconv.Atoi(m[1]); n < 1 || n > rules {
				t.Errorf("%s cites D%d, which docs/semantics.md does not have", path, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
