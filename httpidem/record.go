package httpidem

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// A stored record is text framing around the body, so the Redis script can
// compare fences without decoding it:
//
//	LKR1 <fence: 20 digits> <status>\n
//	<fingerprint>\n
//	<Header-Name>: <value>\n   (one line per value)
//	\n
//	<body bytes>
//
// The fence is the in-flight lease's: a record is only replaced by one
// whose lease came later.
const recordMagic = "LKR1 "

// fenceDigits is the width of the zero-padded fence; equal widths make a
// string comparison a numeric one.
const fenceDigits = 20

var errBadRecord = errors.New("httpidem: malformed stored record")

func fenceString(fence int64) string {
	s := strconv.FormatInt(fence, 10)
	if len(s) < fenceDigits {
		s = "00000000000000000000"[:fenceDigits-len(s)] + s
	}
	return s
}

func encodeRecord(rec *Record, fence int64) []byte {
	n := len(recordMagic) + fenceDigits + 6 + len(rec.Fingerprint) + 2 + len(rec.Body)
	for name, vs := range rec.Header {
		for _, v := range vs {
			n += len(name) + len(v) + 3
		}
	}
	b := make([]byte, 0, n)
	b = append(b, recordMagic...)
	b = append(b, fenceString(fence)...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(rec.Status), 10)
	b = append(b, '\n')
	b = append(b, rec.Fingerprint...)
	b = append(b, '\n')
	for name, vs := range rec.Header {
		for _, v := range vs {
			b = append(b, name...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, '\n')
		}
	}
	b = append(b, '\n')
	return append(b, rec.Body...)
}

// recordFence reads the fence of an encoded record (-1 if malformed).
func recordFence(data []byte) int64 {
	if len(data) < len(recordMagic)+fenceDigits || string(data[:len(recordMagic)]) != recordMagic {
		return -1
	}
	f, err := strconv.ParseInt(string(data[len(recordMagic):len(recordMagic)+fenceDigits]), 10, 64)
	if err != nil {
		return -1
	}
	return f
}

func decodeRecord(data []byte) (*Record, error) {
	if recordFence(data) < 0 {
		return nil, errBadRecord
	}
	line, rest, ok := bytes.Cut(data, []byte{'\n'})
	if !ok || len(line) < len(recordMagic)+fenceDigits+2 {
		return nil, errBadRecord
	}
	status, err := strconv.Atoi(string(line[len(recordMagic)+fenceDigits+1:]))
	if err != nil || status < 100 || status > 999 {
		return nil, fmt.Errorf("%w: status %q", errBadRecord, line)
	}
	rec := &Record{Status: status}
	fp, rest, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok {
		return nil, errBadRecord
	}
	rec.Fingerprint = string(fp)
	for {
		line, rest, ok = bytes.Cut(rest, []byte{'\n'})
		if !ok {
			return nil, errBadRecord
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(": "))
		if !ok {
			return nil, fmt.Errorf("%w: header line %q", errBadRecord, line)
		}
		if rec.Header == nil {
			rec.Header = make(http.Header)
		}
		k := string(name)
		rec.Header[k] = append(rec.Header[k], string(value))
	}
	rec.Body = rest
	return rec, nil
}
