package file

import (
	"github.com/ipclab/logagg/internal/jsonstr"
	"github.com/ipclab/logagg/internal/record"
)

// A file record says which file it came from in one top-level member,
// "log", named as OpenTelemetry's and Elastic's conventions name it:
//
//	{"message":"GET / 200","log":{"file":{"path":"/var/log/nginx/access.log"}},"agg":{…}}
//	{"level":"info","msg":"hi","log":{"file":{"path":"/var/log/pods/…/0.log"},"time":"2026-…Z"},"agg":{…}}
//
// log.file.path is the path the file had when the input first saw it (a
// rotated file keeps the name it was written under); log.time is a
// container runtime's timestamp of the line (format docker and cri). A
// line that is a JSON object keeps its members, with "log" added last (an
// object that has its own top-level "log" is then flagged duplicate_key by
// the encoder); any other line is the "message". The rules match it as
// log.file.path. The record package is shared and this input adds no
// field under agg; see docs/records.md.

// logMember renders the constant part of a file's "log" member:
// "log":{"file":{"path":"P"}.
func logMember(path string) []byte {
	b := append([]byte(nil), `"log":{"file":{"path":"`...)
	b, _ = jsonstr.AppendEscaped(b, []byte(path))
	return append(b, `"}`...)
}

// appendPayload appends the payload of one record to dst: content with
// the file's "log" member (lm, from logMember) and the runtime's time (nil
// for none). It returns the flags the encoder cannot see any more because
// the content was escaped here (invalid UTF-8, NUL, control bytes), or
// malformed_json for a line that starts like an object and does not end
// like one.
func appendPayload(dst, content, lm, ts []byte) ([]byte, record.Flags) {
	var fl record.Flags
	if end, empty, ok := objectEnd(content); ok {
		dst = append(dst, content[:end]...)
		if !empty {
			dst = append(dst, ',')
		}
	} else {
		if first := firstNonSpace(content); first < len(content) && content[first] == '{' {
			fl |= record.FlagMalformedJSON
		}
		dst = append(dst, `{"message":"`...)
		var found jsonstr.Found
		dst, found = jsonstr.AppendEscaped(dst, content)
		if found&jsonstr.InvalidUTF8 != 0 {
			fl |= record.FlagInvalidUTF8
		}
		if found&jsonstr.NUL != 0 {
			fl |= record.FlagNUL
		}
		if found&jsonstr.Control != 0 {
			fl |= record.FlagControl
		}
		dst = append(dst, `",`...)
	}
	dst = append(dst, lm...)
	if ts != nil {
		dst = append(dst, `,"time":"`...)
		dst, _ = jsonstr.AppendEscaped(dst, ts)
		dst = append(dst, '"')
	}
	return append(dst, "}}"...), fl
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func firstNonSpace(b []byte) int {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// objectEnd reports whether b looks like one JSON object ('{' … '}' with
// blanks around) and where its closing brace is; empty says nothing but
// blanks is between the braces. The encoder validates the object.
func objectEnd(b []byte) (end int, empty, ok bool) {
	i := firstNonSpace(b)
	j := len(b) - 1
	for j > i && isSpace(b[j]) {
		j--
	}
	if i >= len(b) || j <= i || b[i] != '{' || b[j] != '}' {
		return 0, false, false
	}
	return j, firstNonSpace(b[i+1:j]) == j-i-1, true
}
