package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ipclab/logagg/internal/record"
)

func TestSelectorMeaning(t *testing.T) {
	type fs struct{ fac, sev int }
	for _, tc := range []struct {
		sel      string
		yes, not []fs
	}{
		{"*.*;auth,authpriv.none", []fs{{0, 0}, {1, 7}, {9, 3}, {23, 6}}, []fs{{4, 0}, {4, 7}, {10, 3}}},
		{"auth,authpriv.*", []fs{{4, 0}, {4, 7}, {10, 6}}, []fs{{1, 6}, {9, 0}}},
		{"mail.err", []fs{{2, 0}, {2, 3}}, []fs{{2, 4}, {2, 7}, {1, 3}}},
		{"kern.=warning", []fs{{0, 4}}, []fs{{0, 3}, {0, 5}}},
		{"mail.*;mail.!=info", []fs{{2, 0}, {2, 7}}, []fs{{2, 6}}},
		{"mail.info;mail.!err", []fs{{2, 4}, {2, 6}}, []fs{{2, 3}, {2, 0}, {2, 7}}},
		{"*.emerg", []fs{{0, 0}, {23, 0}}, []fs{{0, 1}}},
		{"local7.debug", []fs{{23, 7}, {23, 0}}, []fs{{22, 7}}},
		{"security.*", []fs{{4, 2}}, nil},
	} {
		m, err := parseSelector(tc.sel)
		if err != nil {
			t.Fatalf("%s: %v", tc.sel, err)
		}
		for _, c := range tc.yes {
			if !m.matches(c.fac<<3 | c.sev) {
				t.Errorf("%s does not match %d.%d", tc.sel, c.fac, c.sev)
			}
		}
		for _, c := range tc.not {
			if m.matches(c.fac<<3 | c.sev) {
				t.Errorf("%s matches %d.%d", tc.sel, c.fac, c.sev)
			}
		}
	}
	for _, bad := range []string{"", "mail", "mail.", "nofac.*", "mail.loud", ".err"} {
		if _, err := parseSelector(bad); err == nil {
			t.Errorf("selector %q accepted", bad)
		}
	}
}

func TestSeverityCondition(t *testing.T) {
	for spec, want := range map[string]uint8{"err": 0x0f, "=err": 0x08, "!err": 0xf0, "!=err": 0xf7, "none": 0, "*": 0xff, "3": 0x0f} {
		got, err := severityMask(spec)
		if err != nil || got != want {
			t.Errorf("%s: %08b, %v; want %08b", spec, got, err, want)
		}
	}
}

// compileYAML compiles rules written as YAML, as the configuration file
// gives them.
func compileYAML(t testing.TB, src string, outputs []string, unrouted string) *Set {
	t.Helper()
	var specs []Spec
	if err := yaml.Unmarshal([]byte(src), &specs); err != nil {
		t.Fatal(err)
	}
	s, err := Compile(specs, outputs, unrouted)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// encoded decodes payload as the sink does, for a Record.
type encoded struct {
	rec  Record
	line []byte
}

func encode(t testing.TB, payload string, meta *record.Meta) *encoded {
	t.Helper()
	if meta == nil {
		meta = &record.Meta{Transport: "unix", Listener: "unix:///dev/log"}
	}
	meta.Prepare()
	enc := record.NewEncoder()
	line, res := enc.Append(nil, []byte(payload), meta, 0)
	f := *enc.Fields()
	return &encoded{rec: Record{Payload: []byte(payload), Result: res, Fields: &f, Meta: meta}, line: line}
}

const debianRules = `
- name: syslog
  match: {selector: "*.*;auth,authpriv.none"}
  route: [syslog]
- name: auth
  match: {selector: "auth,authpriv.*"}
  route: [auth]
- {name: cron, match: {selector: "cron.*"}, route: [cron]}
- {name: kern, match: {selector: "kern.*"}, route: [kern]}
- {name: mail, match: {selector: "mail.*"}, route: [mail]}
- {name: user, match: {selector: "user.*"}, route: [user]}
`

var debianOutputs = []string{"syslog", "auth", "cron", "kern", "mail", "user"}

func names(s *Set, bits uint64) string {
	var out []string
	for i, n := range s.Outputs {
		if bits&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, ",")
}

func TestDebianRouting(t *testing.T) {
	s := compileYAML(t, debianRules, debianOutputs, Discard)
	var sc Scratch
	for payload, want := range map[string]string{
		"<38>Nov 26 21:03:52 sshd[1]: Accepted password": "auth", // auth.info
		"<86>Nov 26 21:03:52 sudo: pam_unix":             "auth", // authpriv.info
		"<78>Nov 26 21:03:52 CRON[2]: (root) CMD":        "syslog,cron",
		"<4>Nov 26 21:03:52 kernel: oops":                "syslog,kern",
		"<22>Nov 26 21:03:52 postfix[3]: sent":           "syslog,mail",
		"<13>Nov 26 21:03:52 me: hello":                  "syslog,user",
		"<134>Nov 26 21:03:52 app: local0":               "syslog",
		"no PRI at all: user.notice":                     "syslog,user",
		`{"message":"json","level":"error"}`:             "syslog,user",
		// A journal entry, or a record our output wrote: its syslog
		// member's numbers win over the level.
		`{"message":"j","level":"info","syslog":{"facility":10,"severity":6}}`: "auth",
		`{"message":"j","syslog":{"facility":0,"severity":4}}`:                 "syslog,kern",
		`{"message":"j","syslog":{"facility":24,"severity":9}}`:                "syslog,user",
	} {
		e := encode(t, payload, nil)
		d := s.Eval(&e.rec, &sc)
		if got := names(s, d.Outputs); got != want || d.Drop != NotDropped {
			t.Errorf("%q → %q (drop %d), want %q", payload, got, d.Drop, want)
		}
	}
}

func TestEvalActionsAndConditions(t *testing.T) {
	s := compileYAML(t, `
- name: no-debug
  match: {severity: "=debug"}
  drop: true
- name: errors-json
  match:
    format: json
    fields: {"http.status": ">= 500", "user.id": "== \"42\""}
  route: [alerts]
- name: secrets
  match: {message: {regex: "password=\\S+"}}
  redact: [{regex: "password=\\S+", mask: "password=***"}]
- name: root-only
  match: {uid: "0", transport: unix}
  route: [root]
  stop: true
- name: never-for-root
  match: {app: sshd}
  route: [sshd]
- name: not-kern
  match: {not: {facility: kern}, any: [{hostname: web1}, {msgid: ID9}]}
  route: [web]
- name: docker
  match: {tag: {regex: "^dockerd/web-"}}
  route: [web]
`, []string{"main", "alerts", "root", "sshd", "web"}, "main")
	var sc Scratch
	root := &record.Meta{Transport: "unix", Peer: record.Peer{HasCreds: true, PID: 7, UID: 0}}
	user := &record.Meta{Transport: "unix", Peer: record.Peer{HasCreds: true, PID: 8, UID: 1000}}
	tcp := &record.Meta{Transport: "tcp", ParseHostname: true}
	for _, tc := range []struct {
		payload string
		meta    *record.Meta
		out     string
		drop    int
		edits   int
	}{
		{"<15>Nov 26 21:03:52 x: debug noise", user, "", DroppedByRule, 0},
		{`{"message":"GET /","http":{"status":503},"user":{"id":"42"}}`, user, "alerts", 0, 0},
		{`{"message":"GET /","http":{"status":"503"},"user":{"id":"42"}}`, user, "main", 0, 0}, // a string is no number
		{`{"message":"GET /","http":{"status":500},"user":{"id":42}}`, user, "main", 0, 0},     // a number is no string
		{`{"message":"GET /"}`, user, "main", 0, 0},                                            // missing: no match
		{"<38>Nov 26 21:03:52 sshd[1]: password=hunter2 ok", user, "sshd", 0, 1},
		{"<38>Nov 26 21:03:52 sshd[1]: from root", root, "root", 0, 0}, // stop: sshd rule not seen
		{"<38>Nov 26 21:03:52 web1 sshd[1]: remote", tcp, "sshd,web", 0, 0},
		{"<6>Nov 26 21:03:52 web1 kernel: remote kern", tcp, "main", 0, 0},
		{"<165>1 2026-11-26T21:03:52Z h app - ID9 - msgid", tcp, "web", 0, 0},
		{"<30>Nov 26 21:03:52 dockerd/web-1[99]: from a container", user, "web", 0, 0},
		{"<30>Nov 26 21:03:52 dockerd/db-1[99]: another one", user, "main", 0, 0},
	} {
		e := encode(t, tc.payload, tc.meta)
		d := s.Eval(&e.rec, &sc)
		if got := names(s, d.Outputs); got != tc.out || d.Drop != tc.drop || len(d.Edits) != tc.edits {
			t.Errorf("%q → %q drop %d edits %d; want %q drop %d edits %d", tc.payload, got, d.Drop, len(d.Edits), tc.out, tc.drop, tc.edits)
		}
	}
}

func TestUnroutedDiscard(t *testing.T) {
	s := compileYAML(t, `[{match: {app: a}, route: [x]}]`, []string{"x"}, Discard)
	var sc Scratch
	e := encode(t, "<13>Nov 26 21:03:52 b: hi", nil)
	if d := s.Eval(&e.rec, &sc); d.Drop != DroppedUnrouted || d.Outputs != 0 {
		t.Errorf("unrouted: %+v", d)
	}
}

func TestCompileErrorsNameTheRule(t *testing.T) {
	var specs []Spec
	yaml.Unmarshal([]byte(`
- {name: ok, route: [a]}
- {name: bad-sel, match: {selector: "mail.loud"}, route: [a]}
- {match: {fields: {"x": ">= abc"}}, route: [a]}
- {name: bad-route, route: [nowhere]}
- {name: bad-re, match: {message: {regex: "("}}, route: [a]}
- {name: edits-agg, set: {agg.x: 1}}
- {name: nothing}
`), &specs)
	_, err := Compile(specs, []string{"a"}, "a")
	if err == nil {
		t.Fatal("bad rules compiled")
	}
	for _, want := range []string{
		"rules[1] (bad-sel).match.selector:",
		"rules[2] (rule-3).match.fields.x:",
		"rules[3] (bad-route).route:",
		"rules[4] (bad-re).match.message.regex:",
		"rules[5] (edits-agg).set.agg.x:",
		"rules[6] (nothing).route: the rule does nothing",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in:\n%v", want, err)
		}
	}
	var re *Error
	if !errors.As(err, &re) {
		t.Error("not a *rules.Error")
	}
	if _, err := Compile(nil, []string{"a"}, "b"); err == nil {
		t.Error("unrouted to a missing output accepted")
	}
}

func TestRateLimitPerPID(t *testing.T) {
	s := compileYAML(t, `[{name: flood, rate_limit: {key: pid, interval: 1s, burst: 3}, route: [a]}]`, []string{"a"}, "a")
	var sc Scratch
	now := time.Unix(1000, 0)
	send := func(pid int32, at time.Time) *Decision {
		e := encode(t, "<13>Nov 26 21:03:52 x: m", &record.Meta{Transport: "unix", Peer: record.Peer{HasCreds: true, PID: pid}})
		e.rec.Now = at
		return s.Eval(&e.rec, &sc)
	}
	allowed := 0
	for range 10 {
		if send(42, now).Drop == NotDropped {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("%d of 10 allowed in one interval, want 3", allowed)
	}
	if d := send(43, now); d.Drop != NotDropped {
		t.Error("another pid was limited by pid 42's count")
	}
	d := send(42, now.Add(1100*time.Millisecond))
	if d.Drop != NotDropped || len(d.Notices) != 1 || d.Notices[0].Suppressed != 7 || d.Notices[0].Value != "42" || d.Notices[0].Key != "pid" {
		t.Errorf("after the interval: %+v", d)
	}
	if d := send(42, now.Add(1200*time.Millisecond)); len(d.Notices) != 0 {
		t.Errorf("a second notice: %+v", d.Notices)
	}
}

// TestRateLimitKeysAreBounded: a flood of new pids reuses a table of fixed
// size (memory does not grow) and is still limited per pid.
func TestRateLimitKeysAreBounded(t *testing.T) {
	s := compileYAML(t, `[{rate_limit: {burst: 1, interval: 1m, keys: 256}, route: [a]}]`, []string{"a"}, "a")
	l := s.Rules[0].limit
	size := 0
	for i := range l.shards {
		size += len(l.shards[i].entries)
	}
	var sc Scratch
	now := time.Unix(1000, 0)
	for pid := int32(1); pid <= 100000; pid++ {
		e := encode(t, "x", &record.Meta{Peer: record.Peer{HasCreds: true, PID: pid}})
		e.rec.Now = now
		s.Eval(&e.rec, &sc)
	}
	after := 0
	for i := range l.shards {
		after += len(l.shards[i].entries)
	}
	if after != size || size > 512 {
		t.Errorf("table %d → %d entries", size, after)
	}
	e := encode(t, "x", &record.Meta{Peer: record.Peer{HasCreds: true, PID: 100000}})
	e.rec.Now = now
	if d := s.Eval(&e.rec, &sc); d.Drop != DroppedByRateLimit {
		t.Errorf("the most recent pid's second record: %+v", d)
	}
}

func TestEdits(t *testing.T) {
	s := compileYAML(t, `
- name: e
  set: {env: prod, "http.status": 0, "missing.nested": 1}
  remove: [level, "http.path"]
  rename: {source: app}
  redact: [{regex: "\\d{4}-\\d{4}", mask: "####"}, {field: user.card, regex: ".+"}]
`, []string{"a"}, "a")
	var sc Scratch
	var eb EditBuf
	e := encode(t, `{"message":"card 1234-5678 ok","level":"info","source":"shop","http":{"path":"/pay","status":200},"user":{"card":"4111"}}`, nil)
	d := s.Eval(&e.rec, &sc)
	if len(d.Edits) != 1 {
		t.Fatalf("edits %d", len(d.Edits))
	}
	out := d.Edits[0].Edit(e.line, &eb)
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("edited line is not JSON: %v\n%s", err, out)
	}
	got := fmt.Sprintln(m["env"], m["message"], m["level"], m["app"], m["source"], m["http"], m["user"], m["agg"] != nil)
	want := "prod card #### ok <nil> shop <nil> map[status:0] map[card:***] true\n"
	if got != want {
		t.Errorf("edited: %s\n got  %s\n want %s", out, got, want)
	}
	if out[len(out)-1] != '\n' {
		t.Error("the newline is gone")
	}
	// A line without the fields is returned as it was.
	e2 := encode(t, "<13>Nov 26 21:03:52 x: nothing to redact", nil)
	out2 := s.Rules[0].Edit(e2.line, &eb)
	var m2 map[string]any
	if err := json.Unmarshal(out2, &m2); err != nil || m2["env"] != "prod" || m2["level"] != nil || m2["app"] != "x" {
		t.Errorf("syslog line edited: %s (%v)", out2, err)
	}
}

func TestEvalAllocatesNothing(t *testing.T) {
	s := compileYAML(t, debianRules+`
- name: json-errors
  match: {fields: {"http.status": ">= 500"}}
  route: [syslog]
`, debianOutputs, Discard)
	var sc Scratch
	recs := []*encoded{encode(t, "<38>Nov 26 21:03:52 sshd[1]: Accepted", nil), encode(t, `{"message":"x","http":{"status":503}}`, nil)}
	for _, e := range recs {
		s.Eval(&e.rec, &sc)
		if n := testing.AllocsPerRun(100, func() { s.Eval(&e.rec, &sc) }); n != 0 {
			t.Errorf("%s: %v allocations per Eval", e.rec.Payload, n)
		}
	}
}

// TestRenderedRecordsMatchAsRead: a payload the listener rendered
// (record.Meta.Rendered: the encoder copies it and notes no member index)
// meets the rules as the same payload read member by member does.
func TestRenderedRecordsMatchAsRead(t *testing.T) {
	s := compileYAML(t, `
- {name: errors, match: {fields: {"attributes.status": ">= 500", "resource.service.name": "== \"shop\""}}, route: [alerts]}
- {name: warn, match: {severity: "warning"}, route: [warn]}
- {name: shop, match: {app: shop}, route: [shop]}
- {name: body, match: {message: {prefix: "GET"}}, route: [web]}
`, []string{"main", "alerts", "warn", "shop", "web"}, "main")
	var sc Scratch
	for _, payload := range []string{
		`{"timestamp":"2026-11-26T21:03:52Z","level":"ERROR","severity_number":17,"message":"GET /","attributes":{"status":503},"resource":{"service":{"name":"shop"}},"source":"shop"}`,
		`{"level":"WARN","message":"POST /","attributes":{"status":200},"source":"cart"}`,
		`{"body":{"k":"v"},"attributes":{"status":"503"}}`,
		`{}`,
	} {
		var got [2]string
		for i, rendered := range []bool{false, true} {
			m := &record.Meta{Transport: "otlp", Listener: "otlp://127.0.0.1:4317", Rendered: rendered}
			e := encode(t, payload, m)
			d := s.Eval(&e.rec, &sc)
			got[i] = fmt.Sprintf("%s drop %d", names(s, d.Outputs), d.Drop)
		}
		if got[0] != got[1] {
			t.Errorf("%s: read %s, rendered %s", payload, got[0], got[1])
		}
		if payload[1] == 't' && got[1] != "alerts,warn,shop,web drop 0" {
			t.Errorf("%s → %s: the rules did not see its members", payload, got[1])
		}
	}
}
