package file

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/ipclab/logagg/internal/record"
)

// FuzzLines: the line splitter loses no byte and invents none: the
// pieces it passes, with the newlines and CRs it removed, are the input
// it consumed; no piece is longer than the maximum; what it leaves is
// shorter than the maximum and holds no newline.
func FuzzLines(f *testing.F) {
	for _, s := range []string{"a\nb\n", "abc", "a\r\n\n\nb", "xxxxxxxxxxxx\n", "\x00\xff\n"} {
		f.Add([]byte(s), 4)
	}
	f.Fuzz(func(t *testing.T, p []byte, max int) {
		if max < 1 || max > 64 {
			return
		}
		s := lineSplitter{max: max}
		var rebuilt []byte
		last := 0
		n := s.split(p, func(line []byte, fl record.Flags, start, end int) {
			if len(line) > max {
				t.Fatalf("piece of %d > %d", len(line), max)
			}
			if start < last || end < start || end > len(p) {
				t.Fatalf("piece at %d..%d after %d", start, end, last)
			}
			if len(bytes.Trim(p[last:start], "\r\n")) > 0 { // only empty lines are skipped
				t.Fatalf("bytes skipped: %q", p[last:start])
			}
			if !bytes.HasPrefix(p[start:end], line) {
				t.Fatalf("piece %q is not the input %q", line, p[start:end])
			}
			rebuilt = append(rebuilt, line...)
			last = end
		})
		if n < last || n > len(p) {
			t.Fatalf("consumed %d, last piece ended at %d", n, last)
		}
		rest := p[n:]
		if len(rest) > max || bytes.IndexByte(rest, '\n') >= 0 {
			t.Fatalf("left %q", rest)
		}
		strip := func(b []byte) []byte {
			return bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r"), nil), []byte("\n"), nil)
		}
		if !bytes.Equal(strip(rebuilt), strip(p[:n])) {
			t.Fatalf("pieces %q, consumed %q", rebuilt, p[:n])
		}
	})
}

// FuzzContainer: the CRI and Docker decoders never panic, and what they
// decode comes from the line: CRI content is the line's tail, Docker's
// log member unescaped.
func FuzzContainer(f *testing.F) {
	for _, s := range []string{
		"2026-11-26T10:00:00.000000001Z stdout F hello",
		"2026-11-26T10:00:00Z stderr P part",
		"2026-11-26T10:00:00Z stdout F:x",
		`{"log":"one\n","stream":"stdout","time":"2026-11-26T10:00:01Z"}`,
		`{"log":"\u00e9\ud800","stream":"stderr","time":"t","attrs":{"a":"b"}}`,
		`{"log":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if c, err := decodeCRI(line); err == nil {
			if !bytes.HasSuffix(line, c.content) || (c.stream != "stdout" && c.stream != "stderr") {
				t.Fatalf("CRI %q → %+v", line, c)
			}
		}
		if c, _, err := decodeDocker(line, nil); err == nil {
			var d struct {
				Log string `json:"log"`
			}
			if json.Unmarshal(line, &d) != nil || !bytes.HasPrefix([]byte(d.Log), c.content) {
				t.Fatalf("Docker %q → %q", line, c.content)
			}
		}
		_ = detect(line)
	})
}

// FuzzPayload: whatever a file line holds and whatever the path, the
// record is one valid JSON object whose agg.file is the path (agg holds
// what the aggregator adds; the line is decoded as on every input).
func FuzzPayload(f *testing.F) {
	for _, s := range []string{"plain", "{}", `{"a":1}`, "{broken", "\x00\xff", " { } ", `{"agg":1,"log":2}`} {
		f.Add([]byte(s), "/var/log/a.log", []byte("2026-11-26T10:00:01Z"))
	}
	f.Fuzz(func(t *testing.T, content []byte, path string, ts []byte) {
		m := &record.Meta{Transport: Scheme, Listener: "file:///x", File: path, SourceTime: ts}
		m.Prepare()
		line, _ := record.NewEncoder().Append(nil, content, m, 0)
		var r struct {
			Agg struct {
				File       string `json:"file"`
				SourceTime string `json:"source_time"`
			} `json:"agg"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%q → %q: %v", content, line, err)
		}
		if utf8.ValidString(path) && r.Agg.File != path {
			t.Fatalf("agg.file %q, want %q", r.Agg.File, path)
		}
		if utf8.Valid(ts) && len(ts) > 0 && r.Agg.SourceTime != string(ts) {
			t.Fatalf("agg.source_time %q, want %q", r.Agg.SourceTime, ts)
		}
	})
}

// FuzzMultiline: the presets never panic on any sequence of lines.
func FuzzMultiline(f *testing.F) {
	f.Add([]byte("panic: x\n\ngoroutine 1 [running]:\nmain.main()\n\tx.go:1\nTraceback (most recent call last):\n  a\nE: b\n\tat x\nCaused by: y"))
	f.Fuzz(func(t *testing.T, text []byte) {
		for _, r := range []joinRule{javaRule{}, &pythonRule{}, &goRule{}} {
			held := false
			for _, l := range bytes.Split(text, []byte("\n")) {
				if !r.continues(l, held) {
					held = true
				}
			}
		}
	})
}
