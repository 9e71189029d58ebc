// Package admin is an http.Handler for operators: one embedded page and a
// JSON API showing a latchkey deployment's held locks, semaphores and
// read-write locks, their waiters, cronlock's last runs and recent lost
// leases, refreshed live — and, only when the host opts in with
// WithWrites, a force release of a stuck key.
//
// Mount it as net/http/pprof is mounted, behind the host's own
// authentication:
//
//	mux.Handle("/debug/latchkey/", requireAdmin(admin.Handler(locks)))
//
// It works under any path (with or without http.StripPrefix) but one
// ending in /static/: the page's links are relative. Everything it serves is embedded in the binary —
// no CDN, no build step — and readable on a phone.
//
// # Safety
//
// The handler does no authentication: that is the host's middleware's
// job, as for pprof. It is read-only by default: the force release is
// refused (403) unless WithWrites is given. A force release is a POST
// that must carry the key twice (the page asks for a confirmation first),
// and may name the holders confirmed (a form field "token" each, which the
// page sends: a holder that took the key since is left be), and the
// handler's secret token in the X-Latchkey-Token header; the token
// is made at random when the Handler is built and is only in the page, so
// another site cannot read it, and a cross-site form cannot set a header.
// On top of that, cross-origin POSTs are refused by the browser's own
// Sec-Fetch-Site and Origin headers (http.CrossOriginProtection), and the
// page cannot be framed. Keys and metadata are shown as text everywhere:
// html/template escapes them in the page, JSON encodes them in the API,
// the page's script only ever sets textContent, and the Content Security
// Policy allows no inline script.
//
// # What it shows
//
// Locks, primitives and waiters come from core.Client.Scan (at most
// WithLimit of them per refresh), cron runs from cronlock's LastRuns on the
// same Client, with the queued waiters of each primitive and how long the
// first of them has waited. Recent losses are leases this process
// lost, as a Recorder installed on the host's Client (core.WithObserver)
// saw them, and the force releases done through this handler; a lease lost
// in another process is seen there, not here.
package admin
