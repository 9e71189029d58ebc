package admin

import (
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/ops"
)

// pageData is what the page's template renders: the state at load time
// (the script then refreshes it from api/state).
type pageData struct {
	Title   string
	Token   string // the write token; "" when read-only
	Refresh int64
	State   state
}

func (h *handler) servePage(w http.ResponseWriter, r *http.Request) {
	d := pageData{Title: h.cfg.title, Refresh: h.cfg.refresh.Milliseconds(), State: h.state(r.Context(), r.URL.Query().Get("match"))}
	if h.cfg.writes {
		d.Token = h.token
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.page.Execute(w, d); err != nil {
		http.Error(w, "admin: rendering the page failed", http.StatusInternalServerError)
	}
}

// funcs are the template's helpers; html/template escapes what they return.
var funcs = template.FuncMap{
	"waiters": func(p ops.Primitive) string {
		if p.Waiters == 0 {
			return "0"
		}
		return fmt.Sprintf("%d (%s)", p.Waiters, msString(p.OldestWaitMs))
	},
	"ttl": func(ms int64) string {
		if ms < 0 {
			return "none"
		}
		d := time.Duration(ms) * time.Millisecond
		if d < time.Minute {
			return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
		}
		return d.Round(time.Second).String()
	},
	"ms": msString,
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"clock":  func(t time.Time) string { return t.UTC().Format("15:04:05Z") },
	"isLock": func(p ops.Primitive) bool { return p.Type == ops.TypeLock },
	"waiting": func(ps []ops.Primitive) []ops.Primitive {
		var out []ops.Primitive
		for _, p := range ps {
			if p.Waiters > 0 {
				out = append(out, p)
			}
		}
		return out
	},
	"count": func(ps []ops.Primitive, typ string) int {
		n := 0
		for _, p := range ps {
			if (typ == "" || p.Type == typ) && len(p.Holds) > 0 {
				n++
			}
		}
		return n
	},
	"kind": func(k core.Kind) string { return string(k) },
}

// msString formats milliseconds as the page's script does (dur).
func msString(ms int64) string {
	if ms < 1000 {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + "s"
}
