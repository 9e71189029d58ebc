package httpidem

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// neverStored are the response headers no config can store: credentials,
// cookies (Fiber's replay of Set-Cookie to other callers), hop-by-hop
// headers and ones the server computes.
var neverStored = map[string]bool{
	"Set-Cookie": true, "Set-Cookie2": true, "Authorization": true,
	"Proxy-Authorization": true, "Proxy-Authenticate": true, "Www-Authenticate": true,
	"Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Proxy-Connection": true,
	"Content-Length": true, "Date": true, "Idempotent-Replayed": true,
}

// DefaultStoreHeaders are the response headers stored and replayed when
// IdempotencyConfig.StoreHeaders is nil.
var DefaultStoreHeaders = []string{
	"Content-Type", "Content-Encoding", "Content-Language", "Content-Disposition",
	"Content-Location", "Location", "ETag", "Last-Modified",
}

// capture passes a response through to the client and keeps a copy of
// its status, allow-listed headers and body, up to max bytes. A holding
// capture (a request in a transaction) sends nothing but informational
// responses until send: the response goes out only once it is committed.
type capture struct {
	w     http.ResponseWriter
	allow []string // canonical names
	max   int64
	hold  bool

	status   int
	header   http.Header // snapshot taken at WriteHeader
	sent     http.Header // holding: every header, as at WriteHeader
	body     []byte
	overflow bool // the body went over max: not storable
	streamed bool // flushed or hijacked: not storable
	broken   bool // a write to the client failed or fell short: not storable
}

func (c *capture) Header() http.Header { return c.w.Header() }

func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
			c.w.WriteHeader(code) // informational: the final status follows
			return
		}
		c.status = code
		c.snapshot()
		if c.hold {
			c.sent = c.w.Header().Clone()
			return
		}
	} else if c.hold {
		return
	}
	c.w.WriteHeader(code)
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	n, err := len(p), error(nil)
	if !c.hold {
		n, err = c.w.Write(p)
		if err != nil || n < len(p) {
			// The client did not get the response whole (it hung up, or
			// the handler wrote past its Content-Length), and the handler
			// may stop here or go on: what is kept is not known to be the
			// response. Replayed, it would pass for a whole one.
			c.broken = true
		}
	}
	if !c.overflow {
		if int64(len(c.body)+n) > c.max {
			c.overflow, c.body = true, nil
		} else {
			c.body = append(c.body, p[:n]...)
		}
	}
	return n, err
}

// Flush sends what was written so far; a flushed response is streaming and
// is not stored. A holding capture sends nothing before the commit, and
// its response is still stored.
func (c *capture) Flush() {
	if c.hold {
		return
	}
	c.streamed = true
	_ = http.NewResponseController(c.w).Flush()
}

// Hijack hands the connection over; the response is not stored. A holding
// capture refuses: the connection cannot be handed over before the commit.
func (c *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c.streamed = true
	if c.hold {
		return nil, nil, fmt.Errorf("httpidem: no hijacking in a transactional request: %w", http.ErrNotSupported)
	}
	return http.NewResponseController(c.w).Hijack()
}

// send writes a holding capture's response: its headers as they were at
// WriteHeader, its status and its body.
func (c *capture) send() {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	h := c.w.Header()
	for name := range h {
		if _, ok := c.sent[name]; !ok {
			delete(h, name)
		}
	}
	for name, vs := range c.sent {
		h[name] = vs
	}
	c.w.WriteHeader(c.status)
	if len(c.body) > 0 {
		_, _ = c.w.Write(c.body)
	}
}

// Unwrap lets http.NewResponseController reach the underlying writer.
func (c *capture) Unwrap() http.ResponseWriter { return c.w }

func (c *capture) snapshot() {
	src := c.w.Header()
	for _, name := range c.allow {
		vs := src[name]
		if len(vs) == 0 {
			continue
		}
		kept := make([]string, 0, len(vs))
		for _, v := range vs {
			if !strings.ContainsAny(v, "\r\n") {
				kept = append(kept, v)
			}
		}
		if len(kept) > 0 {
			if c.header == nil {
				c.header = make(http.Header, len(c.allow))
			}
			c.header[name] = kept
		}
	}
}

// record returns the response as a Record, or false when it cannot be
// stored (streamed, hijacked, over the size limit, or not sent whole). A
// handler that wrote nothing answered 200 with an empty body (c.status
// stays 0: owner.finish asks).
func (c *capture) record(fp string) (*Record, bool) {
	if c.streamed || c.overflow || c.broken {
		return nil, false
	}
	status := c.status
	if status == 0 {
		status = http.StatusOK
		c.snapshot()
	}
	return &Record{Fingerprint: fp, Status: status, Header: c.header, Body: c.body}, true
}

// writeRecord sends rec as a replay: its headers, Idempotent-Replayed:
// true, its status and its body, byte for byte.
func writeRecord(w http.ResponseWriter, rec *Record) {
	h := w.Header()
	for name, vs := range rec.Header {
		h[name] = append([]string(nil), vs...)
	}
	h.Set(HeaderReplayed, "true")
	if bodyAllowed(rec.Status) {
		h.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	}
	w.WriteHeader(rec.Status)
	if len(rec.Body) > 0 {
		_, _ = w.Write(rec.Body)
	}
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
