package rules

import (
	"bytes"
	"time"

	"github.com/ipclab/logagg/internal/record"
)

// Record is what the rules see of one record: what the encoder read of it
// and what the listener knows.
type Record struct {
	Payload []byte // as received, framing removed
	Result  record.Result
	Fields  *record.Fields
	Meta    *record.Meta
	Now     time.Time // for rate limits; zero: time.Now()
}

// Drop causes.
const (
	NotDropped = iota
	DroppedByRule
	DroppedByRateLimit
	DroppedUnrouted
)

// Decision is what happens to one record.
type Decision struct {
	Outputs uint64 // bit i: Set.Outputs[i]
	Drop    int    // a Dropped… cause, or NotDropped
	By      *Rule  // the rule that dropped it (DroppedByRule, DroppedByRateLimit)
	// Edits are the rules whose edits apply, in order.
	Edits []*Rule
	// Notices are rate-limit summaries to write before the record: a
	// key's records come again after some were suppressed.
	Notices []Notice
}

// Notice says how many records a rate limit suppressed from one key.
type Notice struct {
	Rule       *Rule
	Key        string // pid, uid, app, field:PATH, ...
	Value      string // the key's value, e.g. "4242"
	Suppressed int
}

// Scratch is one goroutine's working space for Eval; its zero value is
// ready. It also counts, per rule, what Eval did, until Take.
type Scratch struct {
	x        evalCtx
	decision Decision
	// Per rule (by Index): records matched, dropped by the rule,
	// suppressed by its rate limit.
	Matched, Dropped, Suppressed []int
}

// evalCtx is the record being evaluated and what was read of it so far.
type evalCtx struct {
	set     *Set
	rec     *Record
	vals    []record.Value
	found   bool // vals hold this record's JSON members
	jsonOK  bool // the record is a JSON object whose members were scanned
	priVal  int
	priDone bool
	buf     []byte // unescaped text of a JSON string
	buf2    []byte
	keyBuf  []byte // a rate limit's key
}

// Eval decides what happens to rec. The Decision, and the slices in it,
// are valid until the next Eval with the same Scratch.
func (s *Set) Eval(rec *Record, sc *Scratch) *Decision {
	x := &sc.x
	x.set, x.rec, x.found, x.priDone = s, rec, false, false
	if n := s.paths.Len(); cap(x.vals) < n {
		x.vals = make([]record.Value, n)
	} else {
		x.vals = x.vals[:n]
	}
	if n := len(s.Rules); len(sc.Matched) < n {
		sc.Matched = append(sc.Matched, make([]int, n-len(sc.Matched))...)
		sc.Dropped = append(sc.Dropped, make([]int, n-len(sc.Dropped))...)
		sc.Suppressed = append(sc.Suppressed, make([]int, n-len(sc.Suppressed))...)
	}
	d := &sc.decision
	d.Outputs, d.Drop, d.By = 0, NotDropped, nil
	d.Edits, d.Notices = d.Edits[:0], d.Notices[:0]
	routed := false
	for _, r := range s.Rules {
		if r.match != nil && !r.match(x) {
			continue
		}
		sc.Matched[r.Index]++
		if r.limit != nil {
			allowed, notice := r.limit.allow(x, rec.Now)
			if notice.Suppressed > 0 {
				notice.Rule = r
				d.Notices = append(d.Notices, notice)
			}
			if !allowed {
				sc.Suppressed[r.Index]++
				d.Drop, d.By, d.Outputs = DroppedByRateLimit, r, 0
				return d
			}
		}
		if r.drop {
			sc.Dropped[r.Index]++
			d.Drop, d.By, d.Outputs = DroppedByRule, r, 0
			return d
		}
		if len(r.edits) > 0 {
			d.Edits = append(d.Edits, r)
		}
		if r.route != 0 {
			d.Outputs |= r.route
			routed = true
		}
		if r.stop {
			break
		}
	}
	if !routed {
		d.Outputs = s.Unrouted
		if d.Outputs == 0 {
			d.Drop = DroppedUnrouted
		}
	}
	return d
}

// Take returns the per-rule counts gathered since the last Take and zeroes
// them (the caller adds them to metrics once per batch).
func (sc *Scratch) Take(fn func(r, matched, dropped, suppressed int)) {
	for i := range sc.Matched {
		if sc.Matched[i] != 0 || sc.Dropped[i] != 0 || sc.Suppressed[i] != 0 {
			fn(i, sc.Matched[i], sc.Dropped[i], sc.Suppressed[i])
			sc.Matched[i], sc.Dropped[i], sc.Suppressed[i] = 0, 0, 0
		}
	}
}

// scan finds the JSON members the rules read, once per record.
func (x *evalCtx) scan() bool {
	if !x.found {
		x.found = true
		switch f := x.rec.Fields; {
		case x.rec.Result.Format != record.FormatJSON:
			x.jsonOK = false
		case f != nil && f.Index != nil:
			// The encoder noted where the top-level members are: only
			// their names, and the objects a path goes into, are read.
			x.jsonOK = x.set.paths.FindMembers(f.Index, x.vals)
		default:
			x.jsonOK = x.set.paths.Find(x.rec.Payload, x.vals)
		}
	}
	return x.jsonOK
}

// field is JSON member i; ok is false for a record that is not a JSON
// object.
func (x *evalCtx) field(i int) (record.Value, bool) {
	if !x.scan() {
		return record.Value{}, false
	}
	return x.vals[i], true
}

// text is a string value's text (unescaped into a scratch buffer).
func (x *evalCtx) text(v record.Value) ([]byte, bool) { return v.Text(&x.buf) }

// pri is the record's facility*8+severity (see defaultFacility).
func (x *evalCtx) pri() int {
	if x.priDone {
		return x.priVal
	}
	x.priDone = true
	if p := x.rec.Fields.PRI; p >= 0 {
		x.priVal = int(p)
		return x.priVal
	}
	fac, sev := defaultFacility, defaultSeverity
	if x.set.level >= 0 && x.scan() {
		if n, ok := x.vals[x.set.sysFac].Int(); ok && 0 <= n && n <= 23 {
			fac = int(n)
		}
		if n, ok := x.vals[x.set.sysSev].Int(); ok && 0 <= n && n <= 7 {
			sev = int(n)
		} else if t, ok := x.vals[x.set.level].Text(&x.buf2); ok {
			if s, known := levelOf(t); known {
				sev = s
			}
		}
	}
	x.priVal = fac<<3 | sev
	return x.priVal
}

// levelOf maps a level name, in any case, to a severity.
func levelOf(t []byte) (int, bool) {
	var lower [16]byte
	if len(t) > len(lower) {
		return 0, false
	}
	for i, c := range t {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	return levelSeverity(string(lower[:len(t)]))
}

// app is the syslog app name, or a JSON record's "source".
func (x *evalCtx) app() []byte {
	if a := x.rec.Fields.App; len(a) > 0 || x.rec.Result.Format != record.FormatJSON {
		return a
	}
	if x.set.source >= 0 {
		if v, ok := x.field(x.set.source); ok {
			t, _ := x.text(v)
			return t
		}
	}
	return nil
}

// message is the record's message: a syslog MSG, a plain-text record, or a
// JSON record's "message" member.
func (x *evalCtx) message() ([]byte, bool) {
	if x.rec.Result.Format != record.FormatJSON {
		return x.rec.Fields.Message, true
	}
	if x.set.message >= 0 {
		if v, ok := x.field(x.set.message); ok && v.Kind == record.KindString {
			return x.text(v)
		}
	}
	return nil, false
}

// keyOf renders the rate-limit key of the record into dst.
func (x *evalCtx) keyOf(l *limiter, dst []byte) ([]byte, bool) {
	p := &x.rec.Meta.Peer
	switch l.key {
	case keyPID, keyUID, keyGID:
		if !p.HasCreds {
			return dst, false
		}
		n := int64(p.PID)
		if l.key == keyUID {
			n = int64(p.UID)
		} else if l.key == keyGID {
			n = int64(p.GID)
		}
		return appendInt(dst, n), true
	case keyApp:
		return append(dst, x.app()...), true
	case keyHost:
		return append(dst, x.rec.Fields.Host...), true
	case keyListener:
		return append(dst, x.rec.Meta.Listener...), true
	case keyTransport:
		return append(dst, x.rec.Meta.Transport...), true
	case keyField:
		v, ok := x.field(l.field)
		if !ok || v.Kind == record.KindMissing {
			return dst, false
		}
		if t, ok := x.text(v); ok {
			return append(dst, t...), true
		}
		return append(dst, bytes.TrimSpace(v.Raw)...), true
	}
	return dst, false
}

func appendInt(dst []byte, n int64) []byte {
	if n < 0 {
		dst = append(dst, '-')
		n = -n
	}
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}
