// Package langbench measures the candidate match languages for the routing
// rules on the same records: our compiled YAML matchers (internal/rules),
// github.com/expr-lang/expr and cel.dev/cel-go (ADR 0049). It is a module
// of its own so that the aggregator does not depend on the candidates it
// did not choose:
//
//	cd contrib/langbench && go test -bench . -benchtime 2s
package langbench

import (
	"fmt"
	"testing"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
	"github.com/google/cel-go/cel"
	"gopkg.in/yaml.v3"

	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/rules"
)

// The records: RFC 3164 lines of every facility and severity, and a
// 400-byte JSON object whose http.status is 503.
func corpus() (lines [][]byte, json []byte) {
	for fac := 0; fac < 24; fac++ {
		for sev := 0; sev < 8; sev++ {
			lines = append(lines, []byte(fmt.Sprintf("<%d>Nov 26 21:03:52 sshd[812]: message %d.%d with some text", fac<<3|sev, fac, sev)))
		}
	}
	json = []byte(`{"timestamp":"2026-11-26T21:03:52.123456Z","level":"info","source":"api-gateway","message":"GET /v1/orders/8812 completed",` +
		`"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","user":{"id":"42","tier":"gold"},` +
		`"client":{"ip":"10.1.2.3","agent":"curl/8.5.0"},"http":{"method":"GET","route":"/v1/orders/:id","status":503,"bytes":1834},"dur_ms":12.5}`)
	return lines, json
}

type encoded struct {
	rec rules.Record
}

func encode(p []byte) *encoded {
	m := &record.Meta{Transport: "unixgram", Listener: "unixgram:///dev/log"}
	m.Prepare()
	enc := record.NewEncoder()
	_, res := enc.Append(nil, p, m, 0)
	f := *enc.Fields()
	return &encoded{rules.Record{Payload: p, Result: res, Fields: &f, Meta: m}}
}

const debian = `
- {name: syslog, match: {selector: "*.*;auth,authpriv.none"}, route: [syslog]}
- {name: auth, match: {selector: "auth,authpriv.*"}, route: [auth]}
- {name: cron, match: {selector: "cron.*"}, route: [cron]}
- {name: kern, match: {selector: "kern.*"}, route: [kern]}
- {name: mail, match: {selector: "mail.*"}, route: [mail]}
- {name: user, match: {selector: "user.*"}, route: [user]}
`

// The same six rules as expressions over facility and severity.
var debianExprs = []string{
	`facility != 4 && facility != 10`,
	`facility == 4 || facility == 10`,
	`facility == 9`, `facility == 0`, `facility == 2`, `facility == 1`,
}

func BenchmarkDebianYAML(b *testing.B) {
	var specs []rules.Spec
	yaml.Unmarshal([]byte(debian), &specs)
	set, err := rules.Compile(specs, []string{"syslog", "auth", "cron", "kern", "mail", "user"}, rules.Discard)
	if err != nil {
		b.Fatal(err)
	}
	lines, _ := corpus()
	var recs []*encoded
	for _, l := range lines {
		recs = append(recs, encode(l))
	}
	var sc rules.Scratch
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		set.Eval(&recs[i%len(recs)].rec, &sc)
	}
}

// Env is what an expr or CEL program sees of a record.
type Env struct {
	Facility int `expr:"facility"`
	Severity int `expr:"severity"`
}

func BenchmarkDebianExpr(b *testing.B) {
	var progs []*vm.Program
	for _, e := range debianExprs {
		p, err := expr.Compile(e, expr.Env(Env{}), expr.AsBool())
		if err != nil {
			b.Fatal(err)
		}
		progs = append(progs, p)
	}
	lines, _ := corpus()
	var envs []Env
	for _, l := range lines {
		f := encode(l).rec.Fields
		envs = append(envs, Env{Facility: int(f.PRI >> 3), Severity: int(f.PRI & 7)})
	}
	var machine vm.VM
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		env := envs[i%len(envs)]
		for _, p := range progs {
			if _, err := machine.Run(p, env); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkDebianCEL(b *testing.B) {
	env, err := cel.NewEnv(cel.Variable("facility", cel.IntType), cel.Variable("severity", cel.IntType))
	if err != nil {
		b.Fatal(err)
	}
	var progs []cel.Program
	for _, e := range debianExprs {
		ast, iss := env.Compile(e)
		if iss.Err() != nil {
			b.Fatal(iss.Err())
		}
		p, err := env.Program(ast)
		if err != nil {
			b.Fatal(err)
		}
		progs = append(progs, p)
	}
	lines, _ := corpus()
	var acts []map[string]any
	for _, l := range lines {
		f := encode(l).rec.Fields
		acts = append(acts, map[string]any{"facility": int64(f.PRI >> 3), "severity": int64(f.PRI & 7)})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a := acts[i%len(acts)]
		for _, p := range progs {
			if _, _, err := p.Eval(a); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// JSON field: http.status >= 500 on the 400-byte object. Our matcher
// scans the object once for the path; expr and CEL need the object
// decoded first (encoding/json into a map), which is what they would cost
// a record.

func BenchmarkFieldYAML(b *testing.B) {
	var specs []rules.Spec
	yaml.Unmarshal([]byte(`[{match: {fields: {"http.status": ">= 500"}}, route: [a]}]`), &specs)
	set, _ := rules.Compile(specs, []string{"a"}, rules.Discard)
	_, js := corpus()
	e := encode(js)
	var sc rules.Scratch
	if set.Eval(&e.rec, &sc).Outputs == 0 {
		b.Fatal("no match")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		set.Eval(&e.rec, &sc)
	}
}

func BenchmarkFieldExpr(b *testing.B) {
	p, err := expr.Compile(`http.status >= 500`, expr.AsBool())
	if err != nil {
		b.Fatal(err)
	}
	_, js := corpus()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var m map[string]any
		if err := jsonUnmarshal(js, &m); err != nil {
			b.Fatal(err)
		}
		if ok, err := expr.Run(p, m); err != nil || ok != true {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkFieldCEL(b *testing.B) {
	env, _ := cel.NewEnv(cel.Variable("http", cel.MapType(cel.StringType, cel.DynType)))
	ast, iss := env.Compile(`http.status >= 500.0`)
	if iss.Err() != nil {
		b.Fatal(iss.Err())
	}
	p, _ := env.Program(ast)
	_, js := corpus()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var m map[string]any
		if err := jsonUnmarshal(js, &m); err != nil {
			b.Fatal(err)
		}
		if v, _, err := p.Eval(map[string]any{"http": m["http"]}); err != nil || v.Value() != true {
			b.Fatal(v, err)
		}
	}
}
