package activity

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendEntry appends e as one JSON object (what json.Marshal makes of
// an Entry, fields in the same order and with the same omissions,
// without the reflection: the writer's main cost otherwise).
func appendEntry(b []byte, e *Entry) []byte {
	b = append(b, `{"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = appendInt(b, "pid", int64(e.Pid))
	b = appendInt(b, "tid", int64(e.Tid))
	b = append(b, `,"uid":`...)
	b = strconv.AppendUint(b, uint64(e.Uid), 10)
	b = appendString(b, "command", e.Command, true)
	b = appendString(b, "branch", e.Branch, true)
	b = appendString(b, "op", e.Op, false)
	b = appendString(b, "path", e.Path, true)
	b = appendString(b, "path2", e.Path2, true)
	b = appendString(b, "attrs", e.Attrs, true)
	b = appendInt(b, "count", e.Count)
	b = appendString(b, "detail", e.Detail, true)
	b = appendInt(b, "ppid", int64(e.Ppid))
	if len(e.Argv) > 0 {
		b = append(b, `,"argv":[`...)
		for i, a := range e.Argv {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, a)
		}
		b = append(b, ']')
	}
	if e.ArgvCut {
		b = append(b, `,"argv_cut":true`...)
	}
	b = appendString(b, "cwd", e.Cwd, true)
	if e.CwdCut {
		b = append(b, `,"cwd_cut":true`...)
	}
	if !e.Start.IsZero() {
		b = append(b, `,"start":"`...)
		b = e.Start.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if e.Exit != nil {
		b = append(b, `,"exit":`...)
		b = strconv.AppendInt(b, int64(*e.Exit), 10)
	}
	b = appendInt(b, "signal", int64(e.Signal))
	b = appendInt(b, "duration_ns", e.DurationNs)
	return append(b, '}')
}

// appendInt appends ,"key":n unless n is 0 (omitempty).
func appendInt(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, n, 10)
}

// appendString appends ,"key":"s", leaving out an empty s when omitEmpty.
func appendString(b []byte, key, s string, omitEmpty bool) []byte {
	if s == "" && omitEmpty {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendJSONString(b, s)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, as
// encoding/json does (without its HTML escaping).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
