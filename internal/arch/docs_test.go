package arch

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

const repoRoot = "../.."

// readmeLimit keeps README.md a tour: what grows past it belongs on a
// reference page in docs/, linked from the README.
const readmeLimit = 12_500

func TestReadmeIsATour(t *testing.T) {
	st, err := os.Stat(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > readmeLimit {
		t.Errorf("README.md is %d bytes, over %d: move the detail to a page in docs/ and link it", st.Size(), readmeLimit)
	}
}

// Every relative link of the README and the pages in docs/ and bench/
// leads to a file that exists and, when it names an anchor in a Markdown
// file, to a heading of that file.
func TestDocLinksResolve(t *testing.T) {
	pages := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "bench/*.md"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, err := filepath.Rel(repoRoot, p)
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, rel)
		}
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			return nil, err
		}
		anchors[page] = headingAnchors(string(b))
		return anchors[page], nil
	}
	links := 0
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range relativeLinks(string(b)) {
			links++
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Clean(filepath.Join(filepath.Dir(page), file))
			}
			if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
				t.Errorf("%s links %s: %v", page, target, err)
				continue
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !a[anchor] {
				t.Errorf("%s links %s: %s has no heading #%s", page, target, dest, anchor)
			}
		}
	}
	if links < 20 {
		t.Errorf("found %d relative links in %v; the link pattern no longer matches the pages", links, pages)
	}
}

var (
	fence    = regexp.MustCompile("(?ms)^```.*?^```")
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)
	htmlID   = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
)

// relativeLinks returns the targets of the Markdown links in text that
// point into the repository (not a URL), outside code.
func relativeLinks(text string) []string {
	text = codeSpan.ReplaceAllString(fence.ReplaceAllString(text, ""), "")
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		out = append(out, target)
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text (lower case, spaces to hyphens, punctuation other than
// '-' and '_' dropped, a repeat suffixed -1, -2, ...) and its HTML anchors
// (<a id="d17">).
func headingAnchors(text string) map[string]bool {
	text = fence.ReplaceAllString(text, "")
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range htmlID.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}
