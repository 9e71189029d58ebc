package admin

import (
	"context"
	"crypto/subtle"
	"fmt"
	"mime"
	"net/http"

	"github.com/latchkey/latchkey/internal/ops"
)

// TokenHeader is the request header that must carry the handler's write
// token on a POST (the page reads the token from its
// <meta name="latchkey-token">).
const TokenHeader = "X-Latchkey-Token"

// evict is POST api/evict: a force release, when every check passes. In
// order: writes enabled (WithWrites), POST, not cross-origin (the
// browser's Sec-Fetch-Site and Origin headers), the write token, a form
// body whose confirm repeats the key.
func (h *handler) evict(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.writes {
		writeError(w, http.StatusForbidden, "read_only",
			"this admin handler is read-only: the host enables force release with admin.WithWrites()")
		return
	}
	if r.Method != http.MethodPost {
		h.methodNotAllowed(w, "POST")
		return
	}
	if err := h.cop.Check(r); err != nil {
		writeError(w, http.StatusForbidden, "cross_origin", "cross-origin request refused: "+err.Error())
		return
	}
	if got := r.Header.Get(TokenHeader); subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
		writeError(w, http.StatusForbidden, "bad_token", "missing or wrong "+TokenHeader+": reload the page")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		writeError(w, http.StatusUnsupportedMediaType, "bad_content_type", "want an application/x-www-form-urlencoded body")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_input", "cannot read the form: "+err.Error())
		return
	}
	key := r.PostForm.Get("key")
	if key == "" || r.PostForm.Get("confirm") != key {
		writeError(w, http.StatusBadRequest, "not_confirmed", "a force release must be confirmed: confirm must repeat the key")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), requestTimeout)
	defer cancel()
	ev, err := ops.Evict(ctx, h.client, key, r.PostForm["token"]...) // none: every hold seen now
	if err != nil && len(ev.Evicted) == 0 {
		failure(w, err)
		return
	}
	cause := "force release through the admin page"
	if ev.Fence > 0 {
		cause += fmt.Sprintf("; the fence is now %d", ev.Fence)
	}
	for _, hd := range ev.Evicted {
		h.evicts.add(Loss{At: ev.At, Key: key, Kind: hd.Kind, Fence: hd.Fence, Cause: cause, Source: SourceEvicted})
	}
	writeJSON(w, http.StatusOK, ev)
}
