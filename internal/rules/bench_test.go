package rules

import (
	"fmt"
	"strings"
	"testing"
)

// debianCorpus is a realistic mix for the Debian rules: every facility
// and severity from the clients of a desktop and a server, RFC 3164 as
// glibc, logger and journald send it.
func debianCorpus(tb testing.TB) []*encoded {
	apps := []string{"sshd[812]", "sudo", "CRON[3321]", "kernel", "postfix/smtpd[901]", "systemd[1]", "NetworkManager[640]", "dbus-daemon[512]"}
	var out []*encoded
	for fac := 0; fac < 24; fac++ {
		for sev := 0; sev < 8; sev++ {
			app := apps[(fac+sev)%len(apps)]
			p := fmt.Sprintf("<%d>Nov 26 21:03:52 %s: message %d.%d with some text that a daemon would write", fac<<3|sev, app, fac, sev)
			out = append(out, encode(tb, p, nil))
		}
	}
	return out
}

// BenchmarkDebianRules: the six rules of Debian 12's rsyslog.conf over
// every facility × severity; reports ns and allocations per record.
func BenchmarkDebianRules(b *testing.B) {
	s := compileYAML(b, debianRules, debianOutputs, Discard)
	corpus := debianCorpus(b)
	var sc Scratch
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Eval(&corpus[i%len(corpus)].rec, &sc)
	}
}

// BenchmarkDebianRulesJSON: the same rules over JSON records as
// applications (and ipcbench's producer) send them, without a PRI: their
// facility and severity come from "level" (in each case slog, logrus and
// zap write it), which every selector reads.
func BenchmarkDebianRulesJSON(b *testing.B) {
	s := compileYAML(b, debianRules, debianOutputs, Discard)
	var corpus []*encoded
	for i, level := range []string{"INFO", "info", "WARN", "warning", "ERROR", "error", "DEBUG", "debug", "Notice", "fatal", "trace", "verbose"} {
		p := fmt.Sprintf(`{"source":"producer-4242","timestamp":"2026-11-27T19:20:00.%06dZ","level":%q,"message":"record %d of a service at work"}`, i, level, i)
		corpus = append(corpus, encode(b, p, nil))
	}
	var sc Scratch
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Eval(&corpus[i%len(corpus)].rec, &sc)
	}
}

// BenchmarkJSONFieldMatch: `http.status >= 500` on a 400-byte object.
func BenchmarkJSONFieldMatch(b *testing.B) {
	s := compileYAML(b, `[{name: errors, match: {fields: {"http.status": ">= 500"}}, route: [a]}]`, []string{"a", "b"}, "b")
	obj := `{"timestamp":"2026-11-26T21:03:52.123456Z","level":"info","source":"api-gateway","message":"GET /v1/orders/8812 completed",` +
		`"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","user":{"id":"42","tier":"gold"},` +
		`"client":{"ip":"10.1.2.3","agent":"curl/8.5.0"},"http":{"method":"GET","route":"/v1/orders/:id","status":503,"bytes":1834},"dur_ms":12.5}`
	obj += strings.Repeat(" ", max(0, 400-len(obj)))
	e := encode(b, obj, nil)
	var sc Scratch
	if d := s.Eval(&e.rec, &sc); names(s, d.Outputs) != "a" {
		b.Fatalf("did not match: %s", names(s, d.Outputs))
	}
	b.SetBytes(int64(len(obj)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Eval(&e.rec, &sc)
	}
}
