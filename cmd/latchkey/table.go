package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// A table prints rows as they come, in columns of fixed widths: streaming
// output cannot measure the longest cell first. Cells are made printable
// (a key may hold any bytes, terminal escape sequences included) and,
// on a terminal, the flexible columns are cut to fit its width.
type table struct {
	w      io.Writer
	cols   []column
	width  int // the terminal's width; 0: not a terminal, no cutting
	header bool
}

type column struct {
	name  string
	width int  // the minimum (fixed columns: the width)
	flex  int  // > 0: shares the room left, in this proportion
	right bool // right-aligned
}

func newTable(w io.Writer, cols ...column) *table {
	t := &table{w: w, cols: cols, width: termWidth(w)}
	room := t.width - 2*(len(cols)-1)
	flex := 0
	for _, c := range cols {
		room -= c.width
		flex += c.flex
	}
	if t.width > 0 && flex > 0 && room > 0 {
		for i := range t.cols {
			if t.cols[i].flex > 0 {
				t.cols[i].width += room * t.cols[i].flex / flex
			}
		}
	}
	return t
}

// row prints one row (and the header before the first).
func (t *table) row(cells ...string) {
	if !t.header {
		t.header = true
		names := make([]string, len(t.cols))
		for i, c := range t.cols {
			names[i] = c.name
		}
		t.print(names)
	}
	t.print(cells)
}

func (t *table) print(cells []string) {
	var b strings.Builder
	for i, c := range t.cols {
		s := printable(cells[i])
		last := i == len(t.cols)-1
		if t.width > 0 && (c.flex > 0 || last) {
			s = cut(s, c.width)
		}
		n := utf8.RuneCountInString(s)
		pad := strings.Repeat(" ", max(c.width-n, 0))
		switch {
		case c.right:
			b.WriteString(pad + s)
		case last:
			b.WriteString(s)
		default:
			b.WriteString(s + pad)
		}
		if !last {
			b.WriteString("  ")
		}
	}
	fmt.Fprintln(t.w, strings.TrimRight(b.String(), " "))
}

// printable escapes what a terminal would interpret: control characters
// and invalid UTF-8 are written as Go escapes.
func printable(s string) string {
	ok := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// cut shortens s to n runes, ending with an ellipsis when cut.
func cut(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// termWidth is w's terminal width: $COLUMNS, else the terminal's, else 0
// when w is not a terminal (then nothing is cut).
func termWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return 0
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 20 {
		return n
	}
	if n := ttyWidth(f); n > 20 {
		return n
	}
	return 100
}

// ttl formats a remaining time: "12.3s", "4m05s", "2h10m"; "none" for no expiry.
func ttl(ms int64) string {
	if ms < 0 {
		return "none"
	}
	return dur(time.Duration(ms) * time.Millisecond)
}

func dur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// stamp formats an instant for a table, in UTC.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// A jsonList streams a JSON array: "[", the elements as they come, "]".
type jsonList struct {
	w io.Writer
	n int
}

func newJSONList(w io.Writer) *jsonList { return &jsonList{w: w} }

func (l *jsonList) add(v any) error {
	sep := ",\n"
	if l.n == 0 {
		sep = "[\n"
	}
	l.n++
	if _, err := io.WriteString(l.w, sep); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = l.w.Write(b)
	return err
}

func (l *jsonList) close() {
	if l.n == 0 {
		io.WriteString(l.w, "[]\n")
		return
	}
	io.WriteString(l.w, "\n]\n")
}

// writeJSON writes one JSON value, indented.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
