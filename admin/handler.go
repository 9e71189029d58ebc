package admin

import (
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
)

//go:embed assets
var assets embed.FS

// handler serves the page, its assets and the JSON API.
type handler struct {
	client *core.Client
	cfg    config
	token  string // the write token (WithWrites), in the page only
	page   *template.Template
	static http.Handler
	cop    *http.CrossOriginProtection
	evicts *Recorder // force releases done here
}

// Handler returns the admin page and JSON API for client's keys. Mount
// it under a path of its own ("/debug/latchkey/"), behind the host's
// authentication; see the package documentation. It is read-only unless
// WithWrites is given. A nil client panics at once (a configuration
// mistake), never per request.
//
// Routes, relative to where it is mounted:
//
//	GET  ./              the page
//	GET  api/state       everything the page shows: locks, cron runs, losses (?match=GLOB)
//	GET  api/locks       the held primitives (?match=GLOB; at most WithLimit)
//	GET  api/key         everything known about one key (?key=K)
//	GET  api/cron        every cronlock job's last run
//	GET  api/losses      recent losses and force releases
//	POST api/evict       force release (WithWrites only): key=K&confirm=K, header X-Latchkey-Token
func Handler(client *core.Client, opts ...Option) http.Handler {
	if client == nil {
		panic("admin: Handler: nil *core.Client")
	}
	h := &handler{client: client, cfg: defaultConfig(), evicts: NewRecorder(50, nil),
		cop: http.NewCrossOriginProtection()}
	for _, o := range opts {
		if o != nil {
			o.apply(&h.cfg)
		}
	}
	h.token = rand.Text()
	h.page = template.Must(template.New("index.html").Funcs(funcs).ParseFS(assets, "assets/index.html"))
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		panic(err) // embedded at build time: cannot fail
	}
	h.static = http.FileServerFS(static)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	p := r.URL.Path
	// The page is any path ending in '/' — the mount point, whatever it
	// names (/api/ or /static/ inside included; a mount point ending in
	// /static/ is the one it cannot serve) — and a file or API route is
	// found from the end of the path.
	page := p == "" || strings.HasSuffix(p, "/")
	if strings.HasSuffix(p, "/static/") { // no directory listings
		writeError(w, http.StatusNotFound, "not_found", "no such page")
		return
	}
	if i := strings.LastIndex(p, "/static/"); i >= 0 && !page && !strings.Contains(p[i:], "/api/") {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.methodNotAllowed(w, "GET")
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = p[i+len("/static"):]
		h.static.ServeHTTP(w, r2)
		return
	}
	route := ""
	if page {
		route = "page"
	} else if i := strings.LastIndex(p, "/api/"); i >= 0 {
		route = p[i+1:]
	}
	if route == "api/evict" {
		h.evict(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.methodNotAllowed(w, "GET")
		return
	}
	switch route {
	case "page":
		h.servePage(w, r)
	case "api/state":
		h.serveState(w, r)
	case "api/locks":
		h.serveLocks(w, r)
	case "api/key":
		h.serveKey(w, r)
	case "api/cron":
		h.serveCron(w, r)
	case "api/losses":
		writeJSON(w, http.StatusOK, map[string]any{"losses": h.losses()})
	default:
		writeError(w, http.StatusNotFound, "not_found", "no such page: "+route)
	}
}

func (h *handler) methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed (want "+allow+")")
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// encoding/json escapes <, > and & (as \u003c …): a key is never
	// markup, even in a browser that sniffs.
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Error: msg, Code: code})
}

// failure answers err: bad input 400, nothing held 404, a backend outage
// 503, anything else 500.
func failure(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidOption):
		writeError(w, http.StatusBadRequest, "invalid_input", err.Error())
	case errors.Is(err, core.ErrNotHeld):
		writeError(w, http.StatusNotFound, "not_held", err.Error())
	case errors.Is(err, core.ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "error", err.Error())
	}
}

// requestTimeout bounds each API call's backend work.
const requestTimeout = 5 * time.Second
