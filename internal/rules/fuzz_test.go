package rules

import (
	"encoding/json"
	"testing"

	"github.com/ipclab/logagg/internal/record"
)

// FuzzEditsKeepJSON: whatever a producer sends, the encoder's line stays
// one valid JSON object after every kind of edit, and Eval never panics.
func FuzzEditsKeepJSON(f *testing.F) {
	s := compileYAML(f, `
- name: all
  match: {any: [{fields: {"a.b": ">= 1"}}, {message: {regex: "x+"}}, {app: app}, {not: {severity: "!err"}}]}
  set: {env: prod, "a.b": "set"}
  remove: [level, "a.c"]
  rename: {source: app_name, "a.d": e}
  redact: [{regex: "[0-9]+", mask: "#"}, {field: a.s, regex: "."}]
  route: [o]
`, []string{"o"}, "o")
	for _, seed := range []string{
		`{"message":"x 123","level":"info","source":"app","a":{"b":2,"c":3,"d":4,"s":"secret"}}`,
		"<13>Nov 26 21:03:52 app[1]: 42 xx",
		`{"a":"not an object","message":7}`,
		`{"message":"\u00e9\n\"q\"","a":{"s":"\ud83d"}}`,
		"plain 12",
		`{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		m := &record.Meta{Transport: "unix", Listener: "unix:///x"}
		m.Prepare()
		enc := record.NewEncoder()
		line, res := enc.Append(nil, payload, m, 0)
		fields := *enc.Fields()
		var sc Scratch
		d := s.Eval(&Record{Payload: payload, Result: res, Fields: &fields, Meta: m}, &sc)
		var eb EditBuf
		out := line
		for _, r := range d.Edits {
			out = r.Edit(out, &eb)
		}
		if len(out) == 0 || out[len(out)-1] != '\n' || !json.Valid(out[:len(out)-1]) {
			t.Fatalf("edited line is not one JSON object:\n in  %q\n out %q", line, out)
		}
	})
}
