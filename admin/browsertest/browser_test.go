package browsertest

import (
	"bytes"
	"context"
	"flag"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/latchkey/latchkey/admin"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/robfig/cron/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var updateScreenshot = flag.Bool("update-screenshot", false, "write the page's screenshot to docs/admin.png")

// findBrowser returns the Chromium to drive: $LATCHKEY_CHROMIUM, or the
// first of Debian's and Google's names on PATH.
func findBrowser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LATCHKEY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no Chromium on PATH (apt-get install chromium, or set LATCHKEY_CHROMIUM)"
	if redistest.Require() {
		t.Fatalf("browsertest: %s (%s=1)", why, redistest.RequireEnv)
	}
	t.Skipf("browsertest: %s (set %s=1 to fail instead)", why, redistest.RequireEnv)
	return ""
}

// mustNew returns v, or panics with err.
func mustNew[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// dialogs accepts the page's force-release confirmations and keeps every
// other dialog: an alert() from a key would be one.
type dialogs struct {
	mu       sync.Mutex
	accepted []string
	other    []string
}

func (d *dialogs) listen(ctx context.Context) {
	events := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range events {
			if err != nil {
				return // the context ended
			}
			confirm := ev.Type == page.DialogTypeConfirm && strings.HasPrefix(ev.Message, "Force release ")
			d.mu.Lock()
			if confirm {
				d.accepted = append(d.accepted, ev.Message)
			} else {
				d.other = append(d.other, string(ev.Type)+": "+ev.Message)
			}
			d.mu.Unlock()
			// Only the confirmation is accepted; anything else (an alert a
			// key smuggled in) is dismissed and reported.
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: confirm})
		}
	}()
}

func (d *dialogs) snapshot() (accepted, other []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.accepted...), append([]string(nil), d.other...)
}

// rowsJS returns the text of a table body's rows, cells joined by " | ".
const rowsJS = `(id) => Array.from(document.querySelectorAll('#' + id + ' tr')).map(
	tr => Array.from(tr.cells).map(td => td.textContent.trim()).join(' | '))`

func rows(ctx context.Context, t *testing.T, tbody string) []string {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string]("("+rowsJS+")("+quote(tbody)+")"))
	if err != nil {
		t.Fatalf("reading #%s: %v", tbody, err)
	}
	return out
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

// waitRow waits until a row of tbody contains every part.
func waitRow(ctx context.Context, t *testing.T, tbody string, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, r := range rows(ctx, t, tbody) {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(r, p)
			}
			if all {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no row of #%s with %q in:\n%s", tbody, parts, strings.Join(rows(ctx, t, tbody), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAdminPage loads the page with locks held, checks the rows, shows
// hostile keys as text, forces a release with writes on (accepting the
// confirmation) and checks that the holder was told and its fence is
// stale; it also checks the phone layout.
func TestAdminPage(t *testing.T) {
	browser := findBrowser(t)

	_, rdb := redistest.Miniredis(t, true)
	rec := admin.NewRecorder(20, nil)
	locks := mustNew(core.NewRedis(rdb, core.WithObserver(rec)))
	defer locks.Close()
	ctx := context.Background()
	held := mustNew(locks.TryLock(ctx, "orders/7", core.WithMetadata("checkout-5f7c · pid 4312"), core.WithTTL(3*time.Second)))
	mustNew(locks.TryLock(ctx, "report:daily", core.WithMetadata("worker-2")))
	mustNew(locks.Campaign(ctx, "scheduler", "10.0.4.17:8080"))
	exports := locks.Semaphore("exports", 3)
	mustNew(exports.TryAcquire(ctx, core.WithMetadata("tenant 41")))
	mustNew(exports.TryAcquire(ctx, core.WithMetadata("tenant 7")))
	mustNew(locks.RWMutex("config").TryRLock(ctx, core.WithMetadata("reader-a")))
	successor := make(chan *core.Lock, 1)
	go func() { // a fair waiter for orders/7: it gets the key after the release
		l, err := locks.Lock(ctx, "orders/7", core.WithFair(), core.WithWaitTimeout(30*time.Second), core.WithMetadata("checkout-9a21 · pid 977"))
		if err != nil {
			t.Errorf("the waiter for orders/7: %v", err)
		}
		successor <- l
	}()
	cl := mustNew(cronlock.New(locks, cronlock.WithNodeID("node-b"), cronlock.WithLogger(cron.DiscardLogger)))
	for name, fail := range map[string]bool{"invoices:send": false, "search:reindex": true} {
		job := mustNew(cl.Job(name, cron.Every(time.Hour), func(context.Context) error {
			if fail {
				return context.DeadlineExceeded
			}
			return nil
		}))
		job.Run()
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/latchkey/", admin.Handler(locks, admin.WithWrites(), admin.WithRecorder(rec),
		admin.WithRefresh(300*time.Millisecond), admin.WithTitle("shop-api")))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	pageURL := srv.URL + "/debug/latchkey/"

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil { // starts the browser, with no timeout
		t.Fatalf("starting %s: %v", browser, err)
	}
	bctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	var d dialogs
	d.listen(bctx)

	if err := chromedp.Do(bctx, chromedp.Navigate(pageURL), chromedp.WaitVisible(chromedp.CSS("#locks-body tr"))); err != nil {
		t.Fatalf("loading %s in %s: %v", pageURL, browser, err)
	}
	row := waitRow(bctx, t, "locks-body", "orders/7", held.Token()[:8], "checkout-5f7c")
	if !regexp.MustCompile(`\| 1 \([0-9.]+m?s\) \|`).MatchString(row) {
		t.Errorf("orders/7 should show its fair waiter and how long it has waited: %q", row)
	}
	waitRow(bctx, t, "locks-body", "scheduler", "10.0.4.17:8080")
	waitRow(bctx, t, "prims-body", "exports", "permit", "tenant 41")
	waitRow(bctx, t, "prims-body", "config", "read", "reader-a")
	waitRow(bctx, t, "waiters-body", "orders/7", "lock", "1")
	waitRow(bctx, t, "cron-body", "search:reindex", "node-b", "context deadline exceeded")

	// Force release, accepting the confirmation.
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`button.release[data-key="orders/7"]`)),
		chromedp.WaitVisible(chromedp.ID("message"))); err != nil {
		t.Fatal(err)
	}
	msg, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID("message")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg, "Released orders/7: 1 hold(s) evicted; the fence is now ") {
		t.Errorf("message after the release: %q", msg)
	}
	accepted, other := d.snapshot()
	if len(accepted) != 1 || !strings.Contains(accepted[0], held.Token()) || !strings.Contains(accepted[0], "fence is raised") {
		t.Errorf("confirmations: %q", accepted)
	}
	if len(other) > 0 {
		t.Errorf("unexpected dialogs (script from a key?): %q", other)
	}
	select {
	case <-held.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the evicted holder was not told")
	}
	next := <-successor // the fair waiter got the key
	if next == nil {
		t.FailNow()
	}
	defer next.Release(ctx)
	if next.Fence() <= held.Fence() {
		t.Errorf("the evicted holder's fence %d is not stale: the next is %d", held.Fence(), next.Fence())
	}
	waitRow(bctx, t, "locks-body", "orders/7", next.Token()[:8], "checkout-9a21")
	waitRow(bctx, t, "losses-body", "orders/7", "evicted", "force release through the admin page")
	waitRow(bctx, t, "losses-body", "orders/7", "lost")

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if img, err := png.Decode(bytes.NewReader(shot)); err != nil || img.Bounds().Dx() < 1000 {
		t.Fatalf("screenshot: %v", err)
	}
	if *updateScreenshot {
		if err := os.WriteFile("../../docs/admin.png", shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote docs/admin.png")
	}

	// Hostile keys: shown by the live refresh (the script), then by the
	// server's template on a reload, as text both times; no alert opens.
	hostile := []string{`<script>alert(1)</script>`, `"><img src=x onerror=alert(2)>`}
	for _, k := range hostile {
		mustNew(locks.TryLock(ctx, k, core.WithMetadata(`<img src=x onerror=alert(3)>`)))
	}
	for _, reload := range []bool{false, true} {
		if reload {
			if err := chromedp.Do(bctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#locks-body tr"))); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range hostile {
			waitRow(bctx, t, "locks-body", k, `<img src=x onerror=alert(3)>`)
		}
		imgs, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('img').length`))
		if err != nil || imgs != 0 {
			t.Errorf("reload %v: %d <img> elements in the page (%v): a key became markup", reload, imgs, err)
		}
	}

	accepted, other = d.snapshot()
	if len(accepted) != 1 || len(other) > 0 {
		t.Errorf("dialogs: accepted %q, other %q", accepted, other)
	}

	// A phone: the tables become cards of labelled lines.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile),
		chromedp.Sleep(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	layout, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[
		getComputedStyle(document.querySelector('#locks thead')).display,
		getComputedStyle(document.querySelector('#locks-body td[data-label]'), '::before').content,
		String(document.documentElement.scrollWidth <= document.documentElement.clientWidth)]`))
	if err != nil || len(layout) != 3 || layout[0] != "none" || layout[1] != `"Key"` || layout[2] != "true" {
		t.Errorf("phone layout (thead display, cell label, no sideways scroll): %q, %v", layout, err)
	}
}
