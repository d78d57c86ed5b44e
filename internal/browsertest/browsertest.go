// Package browsertest runs a headless Chromium for a test, with screenshots
// saved where the test log says. It fails the test, never skips it, when
// Chromium is missing: `make test` installs it (scripts/ensure-chromium.sh).
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browser is one headless Chromium tab, closed when the test ends (before
// cleanups registered earlier, so no page stream holds a server open).
type Browser struct {
	// Ctx bounds everything the browser does.
	Ctx context.Context
	// Shots is the screenshot folder: $TOOLGATE_SCREENSHOTS, or a temporary
	// one.
	Shots string
	// OnFailure, when set, runs before Run fails the test (after the
	// "failed" screenshot), e.g. to log the state behind the page.
	OnFailure func()
	t         testing.TB
}

// Start opens the browser; everything it does must finish within timeout.
// opts are added to the defaults, e.g. chromedp.Flag("host-resolver-rules",
// …) to send a name to a local test server.
func Start(t testing.TB, timeout time.Duration, opts ...chromedp.ExecAllocatorOption) *Browser {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not on PATH (%v): run scripts/ensure-chromium.sh (as root: apt-get install -y chromium)", err)
	}
	shots := os.Getenv("TOOLGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	all := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root in CI containers
		chromedp.DisableGPU,
		chromedp.WindowSize(1100, 1300),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, append(all, opts...)...)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		bcancel()
		_ = chromedp.Cancel(bctx)
		acancel()
		cancel()
	})
	return &Browser{Ctx: bctx, Shots: shots, t: t}
}

// Shot saves a full-page PNG screenshot as name.png in Shots.
func (b *Browser) Shot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		buf, err := chromedp.FullScreenshot(100)(ctx, tg) // quality 100 is PNG
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(b.Shots, name+".png"), buf, 0o644)
	})
}

// Run performs steps; on an error it saves a "failed" screenshot, calls
// OnFailure and fails the test naming what was being done.
func (b *Browser) Run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.Ctx, steps...); err != nil {
		_ = chromedp.Do(b.Ctx, b.Shot("failed"))
		if b.OnFailure != nil {
			b.OnFailure()
		}
		b.t.Fatalf("%s: %v", what, err)
	}
}
