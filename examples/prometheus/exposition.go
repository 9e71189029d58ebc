package main

import (
	"fmt"
	"strings"
)

// A sample is one line of the Prometheus text exposition format: a series
// name, its labels and its value, as a scraper sees them (a histogram is
// its _bucket series, with le, and its _sum and _count).
type sample struct {
	Name   string
	Labels map[string]string
	Value  string
}

// parseExposition reads the text format (version 0.0.4) into samples.
// Comments (# HELP, # TYPE) are skipped; anything it cannot read — a
// quoted UTF-8 metric name included, which the underscore translation
// never produces — is an error rather than a guess.
func parseExposition(text string) ([]sample, error) {
	var out []sample
	for i, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("exposition line %d %q: %w", i+1, line, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSample(line string) (sample, error) {
	s := sample{Labels: map[string]string{}}
	n := nameLen(line, true)
	if n == 0 {
		return s, fmt.Errorf("no metric name")
	}
	s.Name, line = line[:n], line[n:]
	if strings.HasPrefix(line, "{") {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			n := nameLen(line, false)
			if n == 0 || !strings.HasPrefix(line[n:], `="`) {
				return s, fmt.Errorf("bad label at %q", line)
			}
			name := line[:n]
			value, rest, err := unquote(line[n+2:])
			if err != nil {
				return s, err
			}
			if _, dup := s.Labels[name]; dup {
				return s, fmt.Errorf("label %s twice", name)
			}
			s.Labels[name] = value
			line = strings.TrimLeft(rest, " ")
			if strings.HasPrefix(line, ",") {
				line = line[1:]
			} else if !strings.HasPrefix(line, "}") {
				return s, fmt.Errorf("want , or } at %q", line)
			}
		}
	}
	fields := strings.Fields(line)
	if len(fields) < 1 || len(fields) > 2 {
		return s, fmt.Errorf("want a value and an optional timestamp, got %q", line)
	}
	s.Value = fields[0]
	return s, nil
}

// nameLen is the length of the metric name (colons allowed) or label name
// at the start of s.
func nameLen(s string, metric bool) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case c == ':' && metric:
		case '0' <= c && c <= '9' && i > 0:
		default:
			return i
		}
	}
	return len(s)
}

// unquote reads a label value up to its closing quote, undoing the
// format's three escapes (\\, \" and \n), and returns the rest.
func unquote(s string) (value, rest string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 == len(s) {
				return "", "", fmt.Errorf("unterminated label value")
			}
			i++
			switch s[i] {
			case '\\':
				b.WriteByte('\\')
			case '"':
				b.WriteByte('"')
			case 'n':
				b.WriteByte('\n')
			default:
				return "", "", fmt.Errorf(`bad escape \%c in a label value`, s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("unterminated label value")
}
