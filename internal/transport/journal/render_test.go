package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ipclab/logagg/internal/record"
)

func renderOne(t *testing.T, kv ...string) (map[string]any, rendered) {
	t.Helper()
	d := NewDecoder(bytes.NewReader(exportEntry(kv...)))
	e, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	var r renderer
	p, rd := r.render(e)
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		t.Fatalf("%q: %v", p, err)
	}
	return m, rd
}

func TestRender(t *testing.T) {
	cases := []struct {
		name string
		kv   []string
		want string // the payload, as Go prints the decoded map
		peer string
	}{
		{"nothing", nil, "map[]", ""},
		{"message only", []string{"MESSAGE", "hi"}, "map[message:hi]", ""},
		{"multi-line", []string{"MESSAGE", "a\nb"}, "map[message:a\nb]", ""},
		{"peer", []string{"_PID", "7", "_UID", "1000", "_GID", "100"}, "map[]", "7/1000/100/journal"},
		{"pid 0 is no sender", []string{"_PID", "0", "_UID", "0", "_GID", "0"}, "map[journal:map[_GID:0 _PID:0 _UID:0]]", ""},
		{"leading zero stays", []string{"PRIORITY", "06", "SYSLOG_FACILITY", "03"}, "map[journal:map[PRIORITY:06 SYSLOG_FACILITY:03]]", ""},
		{"facility out of range", []string{"SYSLOG_FACILITY", "24"}, "map[journal:map[SYSLOG_FACILITY:24]]", ""},
		{"priority alone", []string{"PRIORITY", "7"}, "map[level:debug syslog:map[severity:7]]", ""},
		{"comm as source", []string{"_COMM", "cron"}, "map[journal:map[_COMM:cron] source:cron]", ""},
		{"repeated", []string{"A", "1", "B", "x", "A", "2", "A", "3"}, "map[journal:map[A:[1 2 3] B:x]]", ""},
		{"second message", []string{"MESSAGE", "one", "MESSAGE", "two"}, "map[journal:map[MESSAGE:two] message:one]", ""},
		{"binary", []string{"B", "\x00\xff"}, "map[journal:map[B:map[base64:AP8=]]]", ""},
		{"control char", []string{"C", "a\x07b"}, "map[journal:map[C:map[base64:YQdi]]]", ""},
		{"tab and CR are text", []string{"T", "a\tb\rc"}, "map[journal:map[T:a\tb\rc]]", ""},
		{"quotes in names and values", []string{"Q\"", "\"\\"}, "map[journal:map[Q\":\"\\]]", ""},
		{"bad timestamp", []string{"__REALTIME_TIMESTAMP", "x"}, "map[journal:map[__REALTIME_TIMESTAMP:x]]", ""},
		{"timestamp", []string{"__REALTIME_TIMESTAMP", "1000000"}, "map[journal:map[__REALTIME_TIMESTAMP:1000000] timestamp:1970-01-01T00:00:01Z]", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, rd := renderOne(t, c.kv...)
			if got := fmt.Sprint(m); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			peer := ""
			if rd.peer.HasCreds {
				peer = fmt.Sprintf("%d/%d/%d/%s", rd.peer.PID, rd.peer.UID, rd.peer.GID, rd.peer.Via)
			}
			if peer != c.peer {
				t.Errorf("peer %q, want %q", peer, c.peer)
			}
		})
	}
}

func TestRenderFlags(t *testing.T) {
	_, rd := renderOne(t, "MESSAGE", "nul\x00here")
	if rd.flags != record.FlagNUL {
		t.Errorf("NUL in the message: flags %v", rd.flags.Names())
	}
	_, rd = renderOne(t, "OTHER", "nul\x00here")
	if rd.flags != 0 {
		t.Errorf("NUL in another field (kept as base64): flags %v", rd.flags.Names())
	}
	d := NewDecoder(bytes.NewReader(exportEntry("MESSAGE", "0123456789")))
	d.MaxValue = 4
	e, _ := d.Next()
	var r renderer
	if _, rd := r.render(e); rd.flags != record.FlagTruncated {
		t.Errorf("cut value: flags %v", rd.flags.Names())
	}
}

// FuzzRender: whatever entries the decoder finds, each renders to one
// JSON object the encoder takes as JSON.
func FuzzRender(f *testing.F) {
	f.Add(exportEntry("MESSAGE", "a\nb", "PRIORITY", "3", "_PID", "1", "_UID", "2", "_GID", "3", "X", "\xff"))
	f.Add(exportEntry("A", "1", "A", "2", "MESSAGE", "x", "MESSAGE", "\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		d := NewDecoder(bytes.NewReader(in))
		var r renderer
		enc := record.NewEncoder()
		for {
			e, err := d.Next()
			if err != nil {
				return
			}
			p, _ := r.render(e)
			if !json.Valid(p) || p[0] != '{' {
				t.Fatalf("not a JSON object: %q", p)
			}
			if _, res := enc.Append(nil, p, nil, 0); res.Format != record.FormatJSON || res.Flags != 0 {
				t.Fatalf("the encoder took %q as %v %v", p, res.Format, res.Flags.Names())
			}
		}
	})
}
