// Package errjoin joins errors on one line. errors.Join separates its
// errors with newlines, which breaks one-line log formats; Join here uses
// "; " and keeps errors.Is and errors.As working on every joined error.
package errjoin

import "strings"

// Join returns an error wrapping the non-nil errs, or nil if there are
// none; with exactly one, it returns that error itself. Its text is the
// errors' texts separated by "; ", each on one line.
func Join(errs ...error) error {
	n := 0
	var only error
	for _, e := range errs {
		if e != nil {
			n++
			only = e
		}
	}
	switch n {
	case 0:
		return nil
	case 1:
		return only
	}
	j := &joined{errs: make([]error, 0, n)}
	for _, e := range errs {
		if e != nil {
			j.errs = append(j.errs, e)
		}
	}
	return j
}

type joined struct{ errs []error }

func (j *joined) Error() string {
	var b strings.Builder
	for i, e := range j.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(strings.ReplaceAll(e.Error(), "\n", "; "))
	}
	return b.String()
}

// Unwrap returns the joined errors, for errors.Is and errors.As.
func (j *joined) Unwrap() []error { return j.errs }
