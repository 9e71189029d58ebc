package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

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

// mustNew returns v, or panics with err.
func mustNew[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Hostile keys and metadata: each would run script if shown unescaped.
const (
	scriptKey = `<script>alert(1)</script>`
	imgKey    = `"><img src=x onerror=alert(2)>`
	badMeta   = `</td><script>alert(3)</script>`
)

// fixture is a Client on miniredis with a lock, a hostile lock, a
// semaphore, a cron run and a Recorder, and a server with the handler.
type fixture struct {
	client *core.Client
	rec    *admin.Recorder
	lock   *core.Lock
	srv    *httptest.Server
}

func newFixture(t *testing.T, opts ...admin.Option) *fixture {
	t.Helper()
	_, rdb := redistest.Miniredis(t, true)
	rec := admin.NewRecorder(10, nil)
	c := mustNew(core.NewRedis(rdb, core.WithObserver(rec)))
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	lk := mustNew(c.TryLock(ctx, "orders/7", core.WithMetadata("node-a"), core.WithTTL(3*time.Second)))
	mustNew(c.TryLock(ctx, scriptKey, core.WithMetadata(badMeta)))
	mustNew(c.TryLock(ctx, imgKey))
	mustNew(c.Semaphore("exports", 2).TryAcquire(ctx, core.WithMetadata(imgKey)))
	l := mustNew(cronlock.New(c, cronlock.WithNodeID("node-b"), cronlock.WithLogger(cron.DiscardLogger)))
	job := mustNew(l.Job("nightly<b>", cron.Every(time.Hour), func(context.Context) error { return errors.New("<i>disk</i> full") }))
	job.Run()

	mux := http.NewServeMux()
	mux.Handle("/debug/latchkey/", admin.Handler(c, append([]admin.Option{admin.WithRecorder(rec)}, opts...)...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &fixture{client: c, rec: rec, lock: lk, srv: srv}
}

func (f *fixture) url(path string) string { return f.srv.URL + "/debug/latchkey/" + path }

func get(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestPage: the page shows every held primitive and the cron run, with
// hostile keys and metadata escaped, under a strict Content Security
// Policy, and no write controls when read-only.
func TestPage(t *testing.T) {
	f := newFixture(t)
	res, body := get(t, f.url(""))
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
		!strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP: %q", csp)
	}
	for _, raw := range []string{scriptKey, imgKey, badMeta, "<b>", "<i>"} {
		if strings.Contains(body, raw) {
			t.Errorf("the page holds %q unescaped", raw)
		}
	}
	for _, want := range []string{
		`<td data-label="Key" class="key">orders/7</td>`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`,
		`&#34;&gt;&lt;img src=x onerror=alert(2)&gt;`,
		`&lt;/td&gt;&lt;script&gt;alert(3)&lt;/script&gt;`,
		`nightly&lt;b&gt;`, `&lt;i&gt;disk&lt;/i&gt; full`,
		`title="` + f.lock.Token() + `"`, f.lock.Token()[:8] + "…",
		`<meta name="latchkey-token" content="">`, `data-writes="false"`, "Read-only.",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, `class="release"`) {
		t.Error("a read-only page shows Release buttons")
	}
	for _, asset := range []string{"static/app.js", "static/style.css"} {
		if res, b := get(t, f.url(asset)); res.StatusCode != 200 || len(b) < 500 {
			t.Errorf("%s: %d, %d bytes", asset, res.StatusCode, len(b))
		}
	}
	for _, path := range []string{"nope", "static/", "api/nope"} {
		if res, _ := get(t, f.url(path)); res.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", path, res.StatusCode)
		}
	}
}

// TestAPI: the JSON answers carry keys exactly, and never as markup.
func TestAPI(t *testing.T) {
	f := newFixture(t)
	res, body := get(t, f.url("api/state"))
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("api/state: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if strings.ContainsAny(body, "<>") {
		t.Errorf("api/state has a raw < or >: %s", body)
	}
	var s struct {
		Writes bool
		Locks  []struct {
			Key   string
			Type  string
			Holds []struct{ Token, Metadata string }
		}
		Cron []struct{ Job, Node, Error string }
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, p := range s.Locks {
		keys[p.Key] = p.Type + " " + p.Holds[0].Metadata
	}
	if len(keys) != 4 || keys[scriptKey] != "lock "+badMeta || keys[imgKey] != "lock " || keys["exports"] != "semaphore "+imgKey {
		t.Errorf("api/state locks: %q", keys)
	}
	if s.Writes || len(s.Cron) != 1 || s.Cron[0].Job != "nightly<b>" || s.Cron[0].Error != "<i>disk</i> full" {
		t.Errorf("api/state: writes %v, cron %+v", s.Writes, s.Cron)
	}

	_, body = get(t, f.url("api/locks?match="+url.QueryEscape("orders/*")))
	if !regexp.MustCompile(`^\{"locks":\[\{"key":"orders/7","type":"lock","holds":\[\{"kind":"lock","holder":"[A-Z0-9]{8}…","token":"` +
		f.lock.Token() + `","metadata":"node-a","fence":\d+,"ttl_ms":\d+\}\],"waiters":0,"oldest_wait_ms":0\}\],"truncated":false\}\n$`).MatchString(body) {
		t.Errorf("api/locks?match=orders/*: %s", body)
	}
	res, body = get(t, f.url("api/key?key="+url.QueryEscape(scriptKey)))
	if res.StatusCode != 200 || !strings.Contains(body, `"key":"\u003cscript\u003ealert(1)\u003c/script\u003e"`) {
		t.Errorf("api/key: %d %s", res.StatusCode, body)
	}
	if res, body := get(t, f.url("api/key?key=%7Dbad")); res.StatusCode != 400 || !strings.Contains(body, `"code":"invalid_input"`) {
		t.Errorf("api/key of an invalid key: %d %s", res.StatusCode, body)
	}
	if res, _ := get(t, f.url("api/locks?match=%5B")); res.StatusCode != 400 {
		t.Errorf("api/locks with a bad pattern: %d", res.StatusCode)
	}
	if res, body := get(t, f.url("api/cron")); res.StatusCode != 200 || !strings.Contains(body, `"job":"nightly\u003cb\u003e"`) {
		t.Errorf("api/cron: %d %s", res.StatusCode, body)
	}
}

// post sends a force release the way the page does, changed by edit.
func post(t *testing.T, f *fixture, token string, form url.Values, edit func(*http.Request)) (int, string) {
	t.Helper()
	req := httptest.NewRequest("POST", f.url("api/evict"), strings.NewReader(form.Encode()))
	req.RequestURI = ""
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set(admin.TokenHeader, token)
	if edit != nil {
		edit(req)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// pageToken reads the write token from the page.
func pageToken(t *testing.T, f *fixture) string {
	t.Helper()
	_, body := get(t, f.url(""))
	m := regexp.MustCompile(`<meta name="latchkey-token" content="([^"]*)">`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no token in the page")
	}
	return m[1]
}

// TestReadOnly: without WithWrites a force release is refused, whatever
// it carries, and nothing changes.
func TestReadOnly(t *testing.T) {
	f := newFixture(t)
	code, body := post(t, f, "anything", url.Values{"key": {"orders/7"}, "confirm": {"orders/7"}}, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "admin.WithWrites()") {
		t.Errorf("read-only evict: %d %s", code, body)
	}
	if info, _ := f.client.Inspect(context.Background(), "orders/7"); info.Token != f.lock.Token() {
		t.Error("a read-only handler released the lock")
	}
}

// TestWriteProtection: with writes on, a force release needs the page's
// token, a same-origin request, a form body and the key confirmed; each
// missing piece is refused and changes nothing.
func TestWriteProtection(t *testing.T) {
	f := newFixture(t, admin.WithWrites())
	token := pageToken(t, f)
	if token == "" {
		t.Fatal("a writable page has no token")
	}
	ok := url.Values{"key": {"orders/7"}, "confirm": {"orders/7"}}
	for _, tc := range []struct {
		name  string
		token string
		form  url.Values
		edit  func(*http.Request)
		code  int
		want  string
	}{
		{"no token", "", ok, nil, 403, "bad_token"},
		{"wrong token", token + "x", ok, nil, 403, "bad_token"},
		{"cross-site", token, ok, func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }, 403, "cross_origin"},
		{"other origin", token, ok, func(r *http.Request) {
			r.Header.Del("Sec-Fetch-Site")
			r.Header.Set("Origin", "https://evil.example")
		}, 403, "cross_origin"},
		{"not a form", token, ok, func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, 415, "bad_content_type"},
		{"not confirmed", token, url.Values{"key": {"orders/7"}}, nil, 400, "not_confirmed"},
		{"confirmed another key", token, url.Values{"key": {"orders/7"}, "confirm": {"orders/8"}}, nil, 400, "not_confirmed"},
		{"GET", token, ok, func(r *http.Request) { r.Method = "GET" }, 405, "method_not_allowed"},
		{"invalid key", token, url.Values{"key": {"}x"}, "confirm": {"}x"}}, nil, 400, "invalid_input"},
		{"free key", token, url.Values{"key": {"free"}, "confirm": {"free"}}, nil, 404, "not_held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, f, tc.token, tc.form, tc.edit)
			if code != tc.code || !strings.Contains(body, `"code":"`+tc.want+`"`) {
				t.Errorf("%d %s, want %d %s", code, body, tc.code, tc.want)
			}
			if info, _ := f.client.Inspect(context.Background(), "orders/7"); info.Token != f.lock.Token() {
				t.Fatal("a refused request released the lock")
			}
		})
	}
}

// TestEvict: a confirmed force release evicts the holder, which is told
// (and recorded as lost), raises the fence, and shows in recent losses.
func TestEvict(t *testing.T) {
	f := newFixture(t, admin.WithWrites())
	_, page := get(t, f.url(""))
	if !strings.Contains(page, `<button type="button" class="release" data-key="orders/7">Release</button>`) ||
		!strings.Contains(page, `data-key="&lt;script&gt;alert(1)&lt;/script&gt;"`) {
		t.Error("the writable page lacks its Release buttons")
	}
	code, body := post(t, f, pageToken(t, f), url.Values{"key": {"orders/7"}, "confirm": {"orders/7"}}, nil)
	var ev struct {
		Key     string
		Evicted []struct {
			Token string
			Fence int64
		}
		Fence int64
	}
	if err := json.Unmarshal([]byte(body), &ev); err != nil || code != 200 || len(ev.Evicted) != 1 ||
		ev.Evicted[0].Token != f.lock.Token() || ev.Fence <= f.lock.Fence() {
		t.Fatalf("evict: %d %s", code, body)
	}
	select {
	case <-f.lock.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the evicted holder was not told")
	}
	next := mustNew(f.client.TryLock(context.Background(), "orders/7"))
	defer next.Release(context.Background())
	if next.Fence() <= f.lock.Fence() {
		t.Errorf("the next fence %d is not above the evicted %d", next.Fence(), f.lock.Fence())
	}
	var losses struct {
		Losses []admin.Loss
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(losses.Losses) < 2 && time.Now().Before(deadline) {
		_, body = get(t, f.url("api/losses"))
		json.Unmarshal([]byte(body), &losses)
	}
	sources := map[string]bool{}
	for _, l := range losses.Losses {
		if l.Key == "orders/7" && l.Fence == f.lock.Fence() {
			sources[l.Source] = true
		}
	}
	if !sources[admin.SourceEvicted] || !sources[admin.SourceLost] {
		t.Errorf("recent losses: %+v", losses.Losses)
	}
}

// TestStripPrefix: the handler serves the same under http.StripPrefix.
func TestStripPrefix(t *testing.T) {
	c := mustNew(core.NewMemory())
	defer c.Close()
	h := http.StripPrefix("/ops", admin.Handler(c))
	for path, code := range map[string]int{"/ops/": 200, "/ops/api/state": 200, "/ops/static/app.js": 200, "/ops/api/nope": 404} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != code {
			t.Errorf("%s: %d, want %d", path, w.Code, code)
		}
	}
}

// TestRecorder: it keeps the latest losses, latest first, and hands every
// call on to the next observer.
func TestRecorder(t *testing.T) {
	next := &counting{}
	r := admin.NewRecorder(2, next)
	for i := range 3 {
		r.LeaseLost(context.Background(), "k", core.KindLock, int64(i), time.Second, core.ErrLost)
	}
	ctx, end := r.OpStart(context.Background(), core.OpAcquire, "k", core.KindLock)
	end(core.OpResult{})
	got := r.Losses()
	if len(got) != 2 || got[0].Fence != 2 || got[1].Fence != 1 || got[0].Cause != core.ErrLost.Error() || ctx == nil {
		t.Errorf("Losses: %+v", got)
	}
	if next.lost != 3 || next.ops != 1 {
		t.Errorf("next saw %d losses, %d ops", next.lost, next.ops)
	}
}

type counting struct{ lost, ops int }

func (c *counting) OpStart(ctx context.Context, _ core.Op, _ string, _ core.Kind) (context.Context, func(core.OpResult)) {
	c.ops++
	return ctx, func(core.OpResult) {}
}

func (c *counting) LeaseLost(context.Context, string, core.Kind, int64, time.Duration, error) {
	c.lost++
}
