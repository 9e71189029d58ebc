package admin

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/latchkey/latchkey/internal/ops"
)

// State is what api/state answers: everything the page shows.
type state struct {
	Now       time.Time         `json:"now"`
	Writes    bool              `json:"writes"`
	RefreshMs int64             `json:"refresh_ms"`
	Match     string            `json:"match"`
	Locks     []ops.Primitive   `json:"locks"`
	Truncated bool              `json:"truncated"` // more than the limit are held
	Cron      []ops.CronRun     `json:"cron"`
	Losses    []Loss            `json:"losses"`
	Errors    map[string]string `json:"errors,omitempty"` // a section that could not be read: why
}

// locks reads at most the limit of held primitives matching match.
func (h *handler) locks(ctx context.Context, match string) ([]ops.Primitive, bool, error) {
	out := []ops.Primitive{}
	for p, err := range ops.Locks(ctx, h.client, match) {
		if err != nil {
			return out, false, err
		}
		if len(out) == h.cfg.limit {
			return out, true, nil
		}
		out = append(out, p)
	}
	return out, false, nil
}

func (h *handler) cron(ctx context.Context) ([]ops.CronRun, error) {
	out := []ops.CronRun{}
	for r, err := range ops.CronRuns(ctx, h.client, "") {
		if err != nil {
			return out, err
		}
		if len(out) == h.cfg.limit {
			break
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ops.CronRun) int { return b.Start.Compare(a.Start) })
	return out, nil
}

// losses merges the Recorder's losses and this handler's evictions, the
// latest first.
func (h *handler) losses() []Loss {
	out := h.evicts.Losses()
	if h.cfg.recorder != nil {
		out = append(out, h.cfg.recorder.Losses()...)
	}
	slices.SortStableFunc(out, func(a, b Loss) int { return b.At.Compare(a.At) })
	return out
}

func (h *handler) state(ctx context.Context, match string) state {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	s := state{Now: time.Now().UTC(), Writes: h.cfg.writes, RefreshMs: h.cfg.refresh.Milliseconds(), Match: match,
		Losses: h.losses()}
	var err error
	if s.Locks, s.Truncated, err = h.locks(ctx, match); err != nil {
		s.Errors = map[string]string{"locks": err.Error()}
	}
	if s.Cron, err = h.cron(ctx); err != nil {
		if s.Errors == nil {
			s.Errors = map[string]string{}
		}
		s.Errors["cron"] = err.Error()
	}
	return s
}

func (h *handler) serveState(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.state(r.Context(), r.URL.Query().Get("match")))
}

func (h *handler) serveLocks(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	locks, more, err := h.locks(ctx, r.URL.Query().Get("match"))
	if err != nil {
		failure(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"locks": locks, "truncated": more})
}

func (h *handler) serveKey(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	k, err := ops.Inspect(ctx, h.client, r.URL.Query().Get("key"))
	if err != nil {
		failure(w, err)
		return
	}
	writeJSON(w, http.StatusOK, k)
}

func (h *handler) serveCron(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	runs, err := h.cron(ctx)
	if err != nil {
		failure(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cron": runs})
}
