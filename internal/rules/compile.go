package rules

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/ipclab/logagg/internal/record"
)

// Discard is the name that stands for no output: `unrouted: discard`
// drops what no rule routes.
const Discard = "discard"

// MaxOutputs is how many outputs a Set can route to (a bit each).
const MaxOutputs = 64

// Set is a compiled rule list. See the package doc.
type Set struct {
	Rules []*Rule
	// Outputs are the output names, in the order of the bits of
	// Decision.Outputs.
	Outputs []string
	// Unrouted are the outputs of a record no rule routed (0: it is
	// dropped, cause unrouted).
	Unrouted uint64

	paths   *record.Paths // JSON members the rules read, found in one scan
	level   int           // index of "level" in paths, or -1
	sysFac  int           // "syslog.facility"
	sysSev  int           // "syslog.severity"
	source  int           // "source"
	message int           // "message"
	// needsJSON says some rule reads a JSON record's members.
	needsJSON bool
}

// Rule is one compiled rule.
type Rule struct {
	Name  string
	Index int // position in the list, from 0

	match cond // nil: every record
	route uint64
	drop  bool
	stop  bool
	limit *limiter
	edits []edit
}

// Routes are the outputs the rule routes to (bit i: Set.Outputs[i]).
func (r *Rule) Routes() uint64 { return r.route }

// HasEdits reports whether the rule changes the records it matches.
func (r *Rule) HasEdits() bool { return len(r.edits) > 0 }

// Error names the rule and the field of a configuration mistake.
type Error struct {
	Index int    // position of the rule, from 0
	Name  string // the rule's name, if it has one
	Field string // e.g. "match.fields.http.status"
	Err   error
}

func (e *Error) Error() string {
	name := ""
	if e.Name != "" {
		name = " (" + e.Name + ")"
	}
	return fmt.Sprintf("rules[%d]%s.%s: %v", e.Index, name, e.Field, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Compile compiles specs against the output names (which must include
// every name a rule routes to). unrouted names the outputs of records no
// rule routes: an output name, or Discard.
func Compile(specs []Spec, outputs []string, unrouted string) (*Set, error) {
	if len(outputs) > MaxOutputs {
		return nil, fmt.Errorf("at most %d outputs", MaxOutputs)
	}
	s := &Set{Outputs: outputs}
	c := &compiler{set: s, outputIndex: map[string]int{}, pathIndex: map[string]int{}}
	for i, o := range outputs {
		c.outputIndex[o] = i
	}
	switch i, ok := c.outputIndex[unrouted]; {
	case unrouted == Discard:
	case ok:
		s.Unrouted = 1 << i
	default:
		return nil, fmt.Errorf("unrouted: %q is no output (outputs: %s; or %s)", unrouted, strings.Join(outputs, ", "), Discard)
	}
	var errs []error
	names := map[string]int{}
	for i, sp := range specs {
		r, err := c.rule(i, sp)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if j, dup := names[r.Name]; dup {
			errs = append(errs, &Error{Index: i, Name: r.Name, Field: "name", Err: fmt.Errorf("also the name of rules[%d]", j)})
		}
		names[r.Name] = i
		s.Rules = append(s.Rules, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.level, s.sysFac, s.sysSev, s.source, s.message = -1, -1, -1, -1, -1
	if i, ok := c.pathIndex["level"]; ok {
		s.level = i
	}
	if i, ok := c.pathIndex["syslog.facility"]; ok {
		s.sysFac = i
	}
	if i, ok := c.pathIndex["syslog.severity"]; ok {
		s.sysSev = i
	}
	if i, ok := c.pathIndex["source"]; ok {
		s.source = i
	}
	if i, ok := c.pathIndex["message"]; ok {
		s.message = i
	}
	s.paths = record.CompilePaths(c.paths...)
	s.needsJSON = len(c.paths) > 0
	return s, nil
}

type compiler struct {
	set         *Set
	outputIndex map[string]int
	pathIndex   map[string]int
	paths       []string
	// errors of the rule being compiled
	idx  int
	name string
	errs []error
}

func (c *compiler) fail(field string, format string, a ...any) {
	c.errs = append(c.errs, &Error{Index: c.idx, Name: c.name, Field: field, Err: fmt.Errorf(format, a...)})
}

// path returns the index of a JSON member path, adding it to the scan.
func (c *compiler) path(p string) int {
	if i, ok := c.pathIndex[p]; ok {
		return i
	}
	i := len(c.paths)
	c.paths = append(c.paths, p)
	c.pathIndex[p] = i
	return i
}

func (c *compiler) rule(i int, sp Spec) (*Rule, error) {
	r := &Rule{Name: sp.Name, Index: i, drop: sp.Drop, stop: sp.Stop}
	if r.Name == "" {
		r.Name = "rule-" + strconv.Itoa(i+1)
	}
	c.idx, c.name, c.errs = i, r.Name, nil
	if sp.Match != nil {
		r.match = c.match("match", sp.Match)
	}
	for _, o := range sp.Route {
		j, ok := c.outputIndex[o]
		if !ok {
			c.fail("route", "%q is no output (outputs: %s)", o, strings.Join(c.set.Outputs, ", "))
			continue
		}
		r.route |= 1 << j
	}
	if sp.Drop && len(sp.Route) > 0 {
		c.fail("drop", "a rule that drops cannot also route")
	}
	if sp.RateLimit != nil {
		r.limit = c.limit(sp.RateLimit, r.Name)
	}
	r.edits = c.edits(sp)
	if !sp.Drop && !sp.Stop && len(sp.Route) == 0 && sp.RateLimit == nil && len(r.edits) == 0 {
		c.fail("route", "the rule does nothing: give route, drop, stop, rate_limit or an edit")
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// cond is a compiled condition.
type cond func(x *evalCtx) bool

func (c *compiler) match(field string, m *Match) cond {
	var all []cond
	add := func(f cond) {
		if f != nil {
			all = append(all, f)
		}
	}
	if m.Selector != "" {
		mask, err := parseSelector(m.Selector)
		if err != nil {
			c.fail(field+".selector", "%v", err)
		} else {
			c.needPRI()
			add(func(x *evalCtx) bool { return mask.matches(x.pri()) })
		}
	}
	if len(m.Facility) > 0 {
		var set uint32
		for _, f := range m.Facility {
			n, err := facility(f)
			if err != nil {
				c.fail(field+".facility", "%v", err)
			}
			set |= 1 << n
		}
		c.needPRI()
		add(func(x *evalCtx) bool { return set&(1<<(x.pri()>>3)) != 0 })
	}
	if m.Severity != "" {
		bits, err := severityMask(m.Severity)
		if err != nil {
			c.fail(field+".severity", "%v", err)
		}
		c.needPRI()
		add(func(x *evalCtx) bool { return bits&(1<<(x.pri()&7)) != 0 })
	}
	if len(m.App) > 0 {
		set := byteSet(m.App)
		c.path("source")
		add(func(x *evalCtx) bool { return set.has(x.app()) })
	}
	if len(m.Hostname) > 0 {
		set := byteSet(m.Hostname)
		add(func(x *evalCtx) bool { return set.has(x.rec.Fields.Host) })
	}
	if len(m.MsgID) > 0 {
		set := byteSet(m.MsgID)
		add(func(x *evalCtx) bool { return set.has(x.rec.Fields.MsgID) })
	}
	if m.Message != nil {
		c.path("message")
		add(c.text(field+".message", m.Message, func(x *evalCtx) ([]byte, bool) { return x.message() }))
	}
	if m.Tag != nil {
		add(c.text(field+".tag", m.Tag, func(x *evalCtx) ([]byte, bool) {
			t := x.rec.Fields.Tag
			return t, len(t) > 0
		}))
	}
	if m.File != nil {
		add(c.text(field+".file", m.File, func(x *evalCtx) ([]byte, bool) {
			f := x.rec.Meta.File
			return unsafe.Slice(unsafe.StringData(f), len(f)), f != ""
		}))
	}
	if len(m.Transport) > 0 {
		set := byteSet(m.Transport)
		add(func(x *evalCtx) bool { return set.hasString(x.rec.Meta.Transport) })
	}
	if len(m.Listener) > 0 {
		set := byteSet(m.Listener)
		add(func(x *evalCtx) bool { return set.hasString(x.rec.Meta.Listener) })
	}
	if len(m.Format) > 0 {
		var set uint8
		for _, f := range m.Format {
			n, ok := formatNames[f]
			if !ok {
				c.fail(field+".format", "%q: want json, raw, rfc3164 or rfc5424", f)
			}
			set |= 1 << n
		}
		add(func(x *evalCtx) bool { return set&(1<<x.rec.Result.Format) != 0 })
	}
	if len(m.Flag) > 0 {
		var set record.Flags
		for _, f := range m.Flag {
			n := flagBit(f)
			if n == 0 {
				c.fail(field+".flag", "%q is no record flag", f)
			}
			set |= n
		}
		add(func(x *evalCtx) bool { return x.rec.Result.Flags&set != 0 })
	}
	for _, id := range []struct {
		name string
		spec string
		get  func(p *record.Peer) int64
	}{
		{"pid", m.PID, func(p *record.Peer) int64 { return int64(p.PID) }},
		{"uid", m.UID, func(p *record.Peer) int64 { return int64(p.UID) }},
		{"gid", m.GID, func(p *record.Peer) int64 { return int64(p.GID) }},
	} {
		if id.spec == "" {
			continue
		}
		cmp, err := parseIntCondition(id.spec)
		if err != nil {
			c.fail(field+"."+id.name, "%v", err)
			continue
		}
		get := id.get
		add(func(x *evalCtx) bool {
			p := &x.rec.Meta.Peer
			return p.HasCreds && cmp(get(p))
		})
	}
	keys := make([]string, 0, len(m.Fields))
	for k := range m.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same order every time: errors and evaluation are stable
	for _, k := range keys {
		add(c.fieldCond(field+".fields."+k, k, m.Fields[k]))
	}
	for i, sub := range m.All {
		add(c.match(fmt.Sprintf("%s.all[%d]", field, i), sub))
	}
	if len(m.Any) > 0 {
		var any []cond
		for i, sub := range m.Any {
			if f := c.match(fmt.Sprintf("%s.any[%d]", field, i), sub); f != nil {
				any = append(any, f)
			}
		}
		add(func(x *evalCtx) bool {
			for _, f := range any {
				if f(x) {
					return true
				}
			}
			return false
		})
	}
	if m.Not != nil {
		if f := c.match(field+".not", m.Not); f != nil {
			add(func(x *evalCtx) bool { return !f(x) })
		}
	}
	switch len(all) {
	case 0:
		return func(*evalCtx) bool { return true }
	case 1:
		return all[0]
	case 2:
		a, b := all[0], all[1]
		return func(x *evalCtx) bool { return a(x) && b(x) }
	}
	return func(x *evalCtx) bool {
		for _, f := range all {
			if !f(x) {
				return false
			}
		}
		return true
	}
}

// needPRI: severity conditions read a JSON record's "level".
// needPRI: a JSON record's facility and severity are read from its
// syslog.facility and syslog.severity, as the journal input and our own
// output write them, else its level.
func (c *compiler) needPRI() {
	c.path("level")
	c.path("syslog.facility")
	c.path("syslog.severity")
}

var formatNames = map[string]record.Format{
	"raw": record.FormatRaw, "json": record.FormatJSON, "rfc3164": record.FormatRFC3164, "rfc5424": record.FormatRFC5424,
}

func flagBit(name string) record.Flags {
	for i := 0; ; i++ {
		n := record.FlagName(i)
		if n == "" {
			return 0
		}
		if n == name {
			return 1 << i
		}
	}
}

func (c *compiler) text(field string, t *Text, get func(*evalCtx) ([]byte, bool)) cond {
	var conds []func([]byte) bool
	if t.Contains != "" {
		s := []byte(t.Contains)
		conds = append(conds, func(b []byte) bool { return bytes.Contains(b, s) })
	}
	if t.Prefix != "" {
		s := []byte(t.Prefix)
		conds = append(conds, func(b []byte) bool { return bytes.HasPrefix(b, s) })
	}
	if t.Regex != "" {
		re, err := regexp.Compile(t.Regex)
		if err != nil {
			c.fail(field+".regex", "%v", err)
		} else {
			conds = append(conds, re.Match)
		}
	}
	if len(conds) == 0 {
		c.fail(field, "give contains, prefix or regex")
	}
	return func(x *evalCtx) bool {
		b, ok := get(x)
		if !ok {
			return false
		}
		for _, f := range conds {
			if !f(b) {
				return false
			}
		}
		return true
	}
}

// stringSet is a small set of strings compared with bytes.
type stringSet []string

func byteSet(s Strings) stringSet { return stringSet(s) }

func (s stringSet) has(b []byte) bool {
	for _, v := range s {
		if string(b) == v {
			return true
		}
	}
	return false
}

func (s stringSet) hasString(b string) bool {
	for _, v := range s {
		if b == v {
			return true
		}
	}
	return false
}

// parseIntCondition reads "N", "== N", "!= N", "< N", "<= N", "> N",
// ">= N".
func parseIntCondition(spec string) (func(int64) bool, error) {
	op, rest := splitOp(spec)
	n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%q: want a number, optionally after ==, !=, <, <=, > or >=", spec)
	}
	switch op {
	case "", "==":
		return func(v int64) bool { return v == n }, nil
	case "!=":
		return func(v int64) bool { return v != n }, nil
	case "<":
		return func(v int64) bool { return v < n }, nil
	case "<=":
		return func(v int64) bool { return v <= n }, nil
	case ">":
		return func(v int64) bool { return v > n }, nil
	case ">=":
		return func(v int64) bool { return v >= n }, nil
	}
	return nil, fmt.Errorf("%q: %s does not compare numbers", spec, op)
}

// splitOp splits a leading comparison operator from a condition.
func splitOp(spec string) (op, rest string) {
	spec = strings.TrimSpace(spec)
	for _, o := range []string{"==", "!=", "<=", ">=", "<", ">"} {
		if strings.HasPrefix(spec, o) {
			return o, strings.TrimSpace(spec[len(o):])
		}
	}
	for _, o := range []string{"contains ", "prefix ", "regex "} {
		if strings.HasPrefix(spec, o) {
			return strings.TrimSpace(o), strings.TrimSpace(spec[len(o):])
		}
	}
	if spec == "exists" || spec == "missing" {
		return spec, ""
	}
	return "", spec
}

// fieldCond compiles one "path": "op value" condition on a JSON member.
func (c *compiler) fieldCond(field, path, spec string) cond {
	if path == "" || strings.Contains(path, "..") || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") {
		c.fail(field, "%q is not a member path like http.status", path)
		return nil
	}
	i := c.path(path)
	op, lit := splitOp(spec)
	switch op {
	case "exists":
		return func(x *evalCtx) bool { v, ok := x.field(i); return ok && v.Kind != record.KindMissing }
	case "missing":
		return func(x *evalCtx) bool { v, ok := x.field(i); return ok && v.Kind == record.KindMissing }
	case "contains", "prefix", "regex":
		s, err := strconv.Unquote(lit)
		if err != nil {
			s = lit
		}
		t := &Text{}
		switch op {
		case "contains":
			t.Contains = s
		case "prefix":
			t.Prefix = s
		default:
			t.Regex = s
		}
		return c.text(field, t, func(x *evalCtx) ([]byte, bool) {
			v, ok := x.field(i)
			if !ok {
				return nil, false
			}
			return x.text(v)
		})
	case "":
		op = "=="
	}
	val, err := parseLiteral(lit)
	if err != nil {
		c.fail(field, "%q: %v", spec, err)
		return nil
	}
	cmp := comparer(op, val)
	if cmp == nil {
		c.fail(field, "%q: %s does not apply to %s", spec, op, val.kindName())
		return nil
	}
	return func(x *evalCtx) bool {
		v, ok := x.field(i)
		return ok && cmp(x, v)
	}
}

// literal is a compiled comparison value.
type literal struct {
	kind record.Kind
	num  float64
	str  []byte
	raw  string // bool and null: the literal's text
}

func (l literal) kindName() string {
	switch l.kind {
	case record.KindString:
		return "a string"
	case record.KindNumber:
		return "a number"
	}
	return l.raw
}

func parseLiteral(s string) (literal, error) {
	switch s {
	case "true", "false":
		return literal{kind: record.KindBool, raw: s}, nil
	case "null":
		return literal{kind: record.KindNull, raw: s}, nil
	}
	if strings.HasPrefix(s, `"`) {
		u, err := strconv.Unquote(s)
		if err != nil {
			return literal{}, fmt.Errorf("bad string %s", s)
		}
		return literal{kind: record.KindString, str: []byte(u)}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return literal{}, errors.New(`want a number, a "quoted string", true, false or null`)
	}
	return literal{kind: record.KindNumber, num: f}, nil
}

func comparer(op string, l literal) func(x *evalCtx, v record.Value) bool {
	switch l.kind {
	case record.KindNumber:
		var f func(a float64) bool
		switch op {
		case "==":
			f = func(a float64) bool { return a == l.num }
		case "!=":
			f = func(a float64) bool { return a != l.num }
		case "<":
			f = func(a float64) bool { return a < l.num }
		case "<=":
			f = func(a float64) bool { return a <= l.num }
		case ">":
			f = func(a float64) bool { return a > l.num }
		case ">=":
			f = func(a float64) bool { return a >= l.num }
		default:
			return nil
		}
		return func(_ *evalCtx, v record.Value) bool {
			a, ok := v.Float()
			return ok && f(a)
		}
	case record.KindString:
		var f func(c int) bool
		switch op {
		case "==":
			f = func(c int) bool { return c == 0 }
		case "!=":
			f = func(c int) bool { return c != 0 }
		case "<":
			f = func(c int) bool { return c < 0 }
		case "<=":
			f = func(c int) bool { return c <= 0 }
		case ">":
			f = func(c int) bool { return c > 0 }
		case ">=":
			f = func(c int) bool { return c >= 0 }
		default:
			return nil
		}
		return func(x *evalCtx, v record.Value) bool {
			t, ok := x.text(v)
			return ok && f(bytes.Compare(t, l.str))
		}
	default: // true, false, null
		switch op {
		case "==":
			return func(_ *evalCtx, v record.Value) bool { return v.Kind == l.kind && string(v.Raw) == l.raw }
		case "!=":
			return func(_ *evalCtx, v record.Value) bool {
				return v.Kind != record.KindMissing && (v.Kind != l.kind || string(v.Raw) != l.raw)
			}
		}
		return nil
	}
}

func (c *compiler) limit(rl *RateLimit, rule string) *limiter {
	l := &limiter{rule: rule, interval: rl.Interval, burst: rl.Burst, keyName: rl.Key}
	if l.interval == 0 {
		l.interval = 5 * time.Second
	}
	if l.burst == 0 {
		l.burst = 200
	}
	keys := rl.Keys
	if keys == 0 {
		keys = 4096
	}
	if l.interval < 0 {
		c.fail("rate_limit.interval", "negative")
	}
	if l.burst < 1 {
		c.fail("rate_limit.burst", "want at least 1")
	}
	if keys < 1 || keys > 1<<20 {
		c.fail("rate_limit.keys", "%d: want 1 to 1048576", keys)
	}
	switch k := rl.Key; {
	case k == "" || k == "pid":
		l.key, l.keyName = keyPID, "pid"
	case k == "uid":
		l.key = keyUID
	case k == "gid":
		l.key = keyGID
	case k == "app":
		l.key = keyApp
		c.path("source")
	case k == "hostname":
		l.key = keyHost
	case k == "listener":
		l.key = keyListener
	case k == "transport":
		l.key = keyTransport
	case strings.HasPrefix(k, "field:"):
		l.key, l.field = keyField, c.path(strings.TrimPrefix(k, "field:"))
	default:
		c.fail("rate_limit.key", "%q: want pid, uid, gid, app, hostname, listener, transport or field:PATH", k)
	}
	l.init(keys)
	return l
}
