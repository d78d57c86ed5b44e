package inbox_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/browsertest"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/web"
)

// serveLoopback serves h as the approver binary does, through web.Serve on
// a loopback port (so behind its loopback guard), until the test ends, and
// returns its base URL.
func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- web.Serve(ctx, ln, h, web.ServeConfig{}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// location reads the page's URL into into.
func location(into *string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		v, err := chromedp.Location()(ctx, tg)
		*into = v
		return err
	})
}

// loaded waits until the page that follows a form post has loaded: one
// without the sign-in form, or with it when back is set. It
// asks the page again and again, since a question sent while the browser
// navigates is lost with the old page.
func loaded(back bool) chromedp.Action[chromedp.Void] {
	cond := `document.readyState === "complete" && !document.querySelector('input[name="token"]')`
	if back {
		cond = `document.readyState === "complete" && !!document.querySelector('input[name="token"]')`
	}
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			ok, err := chromedp.Evaluate[bool](cond)(ctx, tg)
			if err == nil && ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("page not loaded (%s): last %v, %w", cond, err, ctx.Err())
			case <-tick.C:
			}
		}
	})
}

// text reads the text of the element sel names into into.
func text(sel string, into *string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		v, err := chromedp.Text(chromedp.CSS(sel))(ctx, tg)
		*into = v
		return err
	})
}

// TestBrowserSignInOnLoopback signs in to a token-guarded inbox on loopback
// as a person does in Chromium: the inbox sends them to the form, they type
// the token and land on the inbox, then sign out. The inbox once sent
// Referrer-Policy: no-referrer, with which Chromium posts the form with
// Origin: null, and the loopback guard refused both forms with 403.
func TestBrowserSignInOnLoopback(t *testing.T) {
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b, ID: "carol", Token: "s3cret"})
	base := serveLoopback(t, in.Handler())

	br := browsertest.Start(t, 50*time.Second)
	var at, body string
	br.Run("open the inbox without a session",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		location(&at),
		br.Shot("signin-01-form"),
	)
	if u, err := url.Parse(at); err != nil || u.Path != "/login" || u.Query().Get("next") != "/" {
		t.Fatalf("without a session the inbox showed %q, want /login?next=/", at)
	}
	br.Run("type the token and sign in",
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), "s3cret"),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
		loaded(false),
		location(&at),
		text("body", &body),
	)
	if at != base+"/" {
		t.Fatalf("signed in, the browser is at %q showing %q, want %q", at, body, base+"/")
	}
	br.Run("the inbox shows",
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		br.Shot("signin-02-inbox"),
	)
	br.Run("sign out",
		chromedp.Click(chromedp.CSS(`form.logout button`)),
		loaded(true),
		location(&at),
	)
	if at != base+"/login" {
		t.Fatalf("signed out, the browser is at %q, want %q", at, base+"/login")
	}
	br.Run("the session is gone",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		location(&at),
	)
	if !strings.HasPrefix(at, base+"/login?") {
		t.Fatalf("after signing out / showed %q, want the sign-in form", at)
	}
}

// TestBrowserSignInStaysOnOrigin signs in from forms whose next points off
// the site in ways a browser's URL parser undoes (a tab it strips, a
// backslash it reads as a slash): the browser must land on the inbox, never
// on the other host, which here is a local server Chromium resolves
// evil.example to.
func TestBrowserSignInStaysOnOrigin(t *testing.T) {
	var hits atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("<!doctype html><title>evil</title><p id=evil>elsewhere</p>"))
	}))
	t.Cleanup(evil.Close)
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b, ID: "carol", Token: "s3cret"})
	base := serveLoopback(t, in.Handler())

	br := browsertest.Start(t, 50*time.Second,
		chromedp.Flag("host-resolver-rules", "MAP evil.example "+strings.TrimPrefix(evil.URL, "http://")))
	br.OnFailure = func() { t.Logf("the other host was reached %d times", hits.Load()) }
	for i, next := range []string{"/%09/evil.example", "/%5C/evil.example", "/%0A/evil.example", "//evil.example"} {
		var at string
		br.Run("sign in with next="+next,
			chromedp.Navigate(base+"/login?next="+next),
			chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), "s3cret"),
			chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
			loaded(false),
			location(&at),
		)
		if at != base+"/" || hits.Load() != 0 {
			br.Run("screenshot", br.Shot("next-offsite-"+string(rune('0'+i))))
			t.Fatalf("signed in with next=%s, the browser is at %q (other host reached %d times), want %q", next, at, hits.Load(), base+"/")
		}
		br.Run("sign out", chromedp.Click(chromedp.CSS(`form.logout button`)), loaded(true))
	}
}
