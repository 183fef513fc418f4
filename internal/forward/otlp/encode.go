package otlp

import (
	"bytes"
	"encoding/hex"
	"math"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ipclab/logagg/internal/otlpwire"
)

// The mapping of one output line to a LogRecord (docs/records.md, "To
// OTLP"):
//
//   - body: "body" (a record that came in over OTLP, any JSON value), else
//     "message" (a string), else nothing;
//   - time_unix_nano: "timestamp" (RFC 3339); observed_time_unix_nano:
//     "observed_timestamp", else agg.recv_ns;
//   - severity_number: "severity_number", else syslog.severity by the log
//     data model's syslog table, else "level" by name; severity_text:
//     "severity_text", else "level";
//   - resource: a record from OTLP keeps its "resource"; any other gets
//     service.name (syslog.appname, else "source"), host.name
//     (syslog.hostname, else this host) and process.pid (a numeric
//     syslog.procid, else agg.peer.pid), as OpenTelemetry's semantic
//     conventions name them;
//   - scope: a record from OTLP keeps its "scope";
//   - trace_id, span_id (hex), trace_flags, event_name,
//     dropped_attributes_count: from the members of those names;
//   - attributes: a record from OTLP keeps its "attributes"; every other
//     top-level member becomes an attribute of its name, JSON objects as
//     maps, except "syslog" (flattened: syslog.facility, syslog.msgid,
//     syslog.sd, ...) and "agg" (flattened under logagg.: logagg.transport,
//     logagg.listener, logagg.peer.uid, logagg.flags, ...; not recv_ns,
//     which is the observed time, and not file, which is log.file.path,
//     the semantic conventions' name for a file input's path).
//
// A line that is not a JSON object (a torn or hand-edited log) is sent
// whole as the body, its invalid UTF-8 replaced.

var logFilePath = []byte("log.file.path")

// lineEncoder turns output lines into LogRecords, grouped by resource and
// scope, and the groups into one ExportLogsServiceRequest. It belongs to
// one sender goroutine.
type lineEncoder struct {
	hostname string

	groups []group
	index  map[string]int

	members []member // the line's top-level members
	rec     []byte   // the LogRecord being built
	res     []byte   // its Resource
	scope   []byte   // its InstrumentationScope
	attrs   []byte   // its attributes (KeyValue fields)
	str     []byte   // scratch: an unescaped string
	nbuf    []byte   // scratch: an unescaped member name
	key     []byte   // scratch: a flattened key
	id      [16]byte // scratch: a trace or span id

	// What consecutive lines repeat is encoded once: a connection's agg
	// (all but recv_ns), a source's resource, a second's timestamp, a
	// group. Each cache holds the input it was made from and is used only
	// for the same input, byte for byte, so the request is the one a fresh
	// encoder makes (TestCachesChangeNothing). With request writing each
	// length once, they took BenchmarkEncode from 1.65 µs per record to
	// 0.72–0.91 (2026-11-27).
	agg  aggCache
	resc resCache
	ts   tsCache
	last int // the group of the previous line, -1 for none
}

// aggCache is what the last full read of an "agg" object made of it.
type aggCache struct {
	ok       bool
	tail     []byte // the object after its leading recv_ns member
	attrs    []byte // the attributes it became
	pid      int64  // peer.pid, when pidOK
	pidOK    bool
	fromOTLP bool
}

// resCache is the last resource built, and what it was built from.
type resCache struct {
	ok   bool
	key  []byte // the raw values it was made of, each after its length
	next []byte // scratch: the next line's key
	res  []byte
	src  bool // "source" became service.name
}

// tsCache is the Unix time of the last RFC 3339 time read with a Z
// suffix, to the second, and its text up to the second.
type tsCache struct {
	prefix []byte // "2006-01-02T15:04:05"
	sec    int64
}

type group struct {
	res, scope []byte
	recs       []byte // LogRecords, each as field ScopeLogs.log_records
	n          int
}

// member is one top-level member of a line: its name, unescaped, and its
// raw JSON value.
type member struct {
	name []byte
	val  []byte
}

func newLineEncoder(hostname string) *lineEncoder {
	return &lineEncoder{hostname: hostname, index: map[string]int{}, last: -1}
}

// reset starts a new request.
func (e *lineEncoder) reset() {
	for i := range e.groups {
		e.groups[i].recs = e.groups[i].recs[:0]
		e.groups[i].n = 0
	}
	e.groups = e.groups[:0]
	clear(e.index)
	e.last = -1
}

// beginMsg starts a length-delimited field; endMsg finishes it. The
// length is reserved as one byte and the content moved when it needs more,
// which only messages of 128 bytes and more do, so the encoding stays
// canonical without measuring every message first.
func beginMsg(b []byte, num protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = append(b, 0)
	return b, len(b)
}

func endMsg(b []byte, start int) []byte {
	n := len(b) - start
	if n < 0x80 {
		b[start-1] = byte(n)
		return b
	}
	sz := protowire.SizeVarint(uint64(n))
	for range sz - 1 {
		b = append(b, 0)
	}
	copy(b[start-1+sz:], b[start:start+n])
	protowire.AppendVarint(b[:start-1], uint64(n))
	return b
}

func appendStringField(b []byte, num protowire.Number, s []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendKVString appends a KeyValue field num holding key and the string
// val.
func appendKVString(b []byte, num protowire.Number, key string, val []byte) []byte {
	b, kv := beginMsg(b, num)
	b = protowire.AppendTag(b, otlpwire.KeyValueKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b, av := beginMsg(b, otlpwire.KeyValueValue)
	b = appendStringField(b, otlpwire.AnyString, val)
	b = endMsg(b, av)
	return endMsg(b, kv)
}

func appendKVInt(b []byte, num protowire.Number, key string, v int64) []byte {
	b, kv := beginMsg(b, num)
	b = protowire.AppendTag(b, otlpwire.KeyValueKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b, av := beginMsg(b, otlpwire.KeyValueValue)
	b = protowire.AppendTag(b, otlpwire.AnyInt, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(v))
	b = endMsg(b, av)
	return endMsg(b, kv)
}

// add encodes one line (without its '\n') into its group.
func (e *lineEncoder) add(line []byte) {
	e.rec, e.res, e.scope, e.attrs = e.rec[:0], e.res[:0], e.scope[:0], e.attrs[:0]
	if !e.split(line) {
		body := line
		if !utf8.Valid(body) {
			body = bytes.ToValidUTF8(body, []byte("\uFFFD"))
		}
		b, av := beginMsg(e.rec, otlpwire.LogBody)
		b = appendStringField(b, otlpwire.AnyString, body)
		e.rec = endMsg(b, av)
		e.resourceOf(nil, nil, 0, false)
		e.file()
		return
	}
	var (
		body, message, ts, observed, level, sevNum, sevText []byte
		source, sys, attrs, res, scope, traceID, spanID     []byte
		flags, event, dropped                               []byte
	)
	fromOTLP := false
	var aggRecv []byte
	var pid int64
	pidOK := false
	for _, m := range e.members {
		if string(m.name) == "agg" && len(m.val) > 0 && m.val[0] == '{' {
			aggRecv, pid, pidOK, fromOTLP = e.aggOf(m.val)
		}
	}
	for _, m := range e.members {
		switch string(m.name) {
		case "body":
			body = m.val
		case "message":
			message = m.val
		case "timestamp":
			ts = m.val
		case "observed_timestamp":
			observed = m.val
		case "level":
			level = m.val
		case "severity_number":
			sevNum = m.val
		case "severity_text":
			sevText = m.val
		case "source":
			source = m.val
		case "syslog":
			sys = m.val
		case "agg":
		case "attributes":
			if fromOTLP {
				attrs = m.val
			} else {
				e.attr(m.name, m.val)
			}
		case "resource":
			if fromOTLP {
				res = m.val
			} else {
				e.attr(m.name, m.val)
			}
		case "scope":
			if fromOTLP {
				scope = m.val
			} else {
				e.attr(m.name, m.val)
			}
		case "trace_id":
			traceID = m.val
		case "span_id":
			spanID = m.val
		case "trace_flags":
			flags = m.val
		case "event_name":
			event = m.val
		case "dropped_attributes_count":
			dropped = m.val
		default:
			e.attr(m.name, m.val)
		}
	}
	b := e.rec
	if t, ok := e.timeOf(ts); ok {
		b = protowire.AppendTag(b, otlpwire.LogTimeUnixNano, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, t)
	}
	obs, ok := e.timeOf(observed)
	if !ok {
		if n, iok := intOf(aggRecv); iok && n > 0 {
			obs, ok = uint64(n), true
		}
	}
	if ok {
		b = protowire.AppendTag(b, otlpwire.LogObservedTimeUnixNano, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, obs)
	}
	var sev int32
	if n, ok := intOf(sevNum); ok {
		sev = int32(n)
	} else if n, ok := intOf(objectMember(sys, "severity")); ok {
		sev = otlpwire.SyslogSeverity(n)
	} else if s, ok := e.stringOf(level); ok {
		sev = otlpwire.SeverityNumberOfLevel(s)
	}
	if sev != 0 {
		b = protowire.AppendTag(b, otlpwire.LogSeverityNumber, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(sev)))
	}
	if s, ok := e.stringOf(sevText); ok {
		b = appendStringField(b, otlpwire.LogSeverityText, s)
	} else if s, ok := e.stringOf(level); ok {
		b = appendStringField(b, otlpwire.LogSeverityText, s)
	}
	switch {
	case body != nil:
		var av int
		b, av = beginMsg(b, otlpwire.LogBody)
		b = e.anyValue(b, body, 0)
		b = endMsg(b, av)
	case message != nil:
		var av int
		b, av = beginMsg(b, otlpwire.LogBody)
		b = e.anyValue(b, message, 0)
		b = endMsg(b, av)
	}
	if fromOTLP && attrs != nil && attrs[0] == '{' {
		b = e.keyValues(b, otlpwire.LogAttributes, attrs, 0)
	}
	if sys != nil && sys[0] == '{' {
		e.key = append(e.key[:0], "syslog"...)
		e.flattenExcept(sys, "severity")
	}
	b = append(b, e.attrs...)
	if n, ok := intOf(dropped); ok && n > 0 {
		b = protowire.AppendTag(b, otlpwire.LogDroppedAttributeCount, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n))
	}
	if n, ok := intOf(flags); ok && n > 0 {
		b = protowire.AppendTag(b, otlpwire.LogFlags, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, uint32(n))
	}
	if id, ok := e.hexOf(traceID, 16); ok {
		b = appendStringField(b, otlpwire.LogTraceID, id)
	}
	if id, ok := e.hexOf(spanID, 8); ok {
		b = appendStringField(b, otlpwire.LogSpanID, id)
	}
	if s, ok := e.stringOf(event); ok {
		b = appendStringField(b, otlpwire.LogEventName, s)
	}
	e.rec = b
	if fromOTLP && res != nil {
		if res[0] == '{' {
			e.res = e.keyValues(e.res, otlpwire.ResourceAttributes, res, 0)
		}
	} else if !e.resourceOf(sys, source, pid, pidOK) && source != nil {
		e.attrs = e.attrs[:0]
		e.attr([]byte("source"), source)
		e.rec = append(e.rec, e.attrs...)
	}
	if fromOTLP && scope != nil && scope[0] == '{' {
		e.scopeOf(scope)
	}
	e.file()
}

// aggOf adds the members of agg, an "agg" object, as logagg.* attributes
// (recv_ns is the observed time already), and returns what the mapping
// needs of it: recv_ns, peer.pid, and whether the record came over OTLP.
func (e *lineEncoder) aggOf(agg []byte) (recv []byte, pid int64, pidOK, fromOTLP bool) {
	recv, tail := splitRecvNS(agg)
	c := &e.agg
	if tail != nil && c.ok && bytes.Equal(tail, c.tail) {
		e.attrs = append(e.attrs, c.attrs...)
		return recv, c.pid, c.pidOK, c.fromOTLP
	}
	start := len(e.attrs)
	var peer []byte
	recvs := 0
	e.key = append(e.key[:0], "logagg"...)
	eachMember(agg, func(name, val []byte) bool {
		switch string(name) {
		case "transport":
			fromOTLP = len(val) > 5 && bytes.HasPrefix(val, []byte(`"otlp`))
		case "recv_ns":
			recv = val
			recvs++
			return true
		case "file": // a file input's path, by the semantic conventions' name
			e.attr(logFilePath, val)
			return true
		case "peer":
			peer = val
		}
		e.flattenMember(len("logagg"), name, val)
		return true
	})
	e.key = e.key[:0]
	pid, pidOK = intOf(objectMember(peer, "pid"))
	// Kept for the next line only when recv_ns is the leading member and
	// the only one: the cached answer takes it from there.
	c.ok = tail != nil && recvs == 1
	if c.ok {
		c.tail = append(c.tail[:0], tail...)
		c.attrs = append(c.attrs[:0], e.attrs[start:]...)
		c.pid, c.pidOK, c.fromOTLP = pid, pidOK, fromOTLP
	}
	return recv, pid, pidOK, fromOTLP
}

// splitRecvNS splits an agg object as the aggregator writes it,
// {"recv_ns":N,..., into N and what follows N's comma; tail is nil for any
// other shape.
func splitRecvNS(agg []byte) (recv, tail []byte) {
	const lead = `{"recv_ns":`
	if !bytes.HasPrefix(agg, []byte(lead)) {
		return nil, nil
	}
	i := len(lead)
	for i < len(agg) && agg[i] >= '0' && agg[i] <= '9' {
		i++
	}
	if i == len(lead) || i >= len(agg) || agg[i] != ',' {
		return nil, nil
	}
	return agg[len(lead):i], agg[i+1:]
}

// resourceOf builds the resource of a record that did not come over OTLP
// (pid is its agg.peer.pid, when pidOK); it reports whether "source"
// became its service.name.
func (e *lineEncoder) resourceOf(sys, source []byte, pid int64, pidOK bool) (usedSource bool) {
	appname, hostname, procid := objectMembers3(sys, "appname", "hostname", "procid")
	c := &e.resc
	k := c.next[:0]
	for _, v := range [...][]byte{appname, source, hostname, procid} {
		k = append(protowire.AppendVarint(k, uint64(len(v))), v...)
	}
	if pidOK {
		k = strconv.AppendInt(k, pid, 10)
	}
	if c.ok && bytes.Equal(k, c.key) {
		c.next = k
		e.res = append(e.res[:0], c.res...)
		return c.src
	}
	c.key, c.next = k, c.key
	usedSource = e.buildResource(appname, source, hostname, procid, pid, pidOK)
	c.res = append(c.res[:0], e.res...)
	c.src, c.ok = usedSource, true
	return usedSource
}

// objectMembers3 returns the raw values of three members of object obj
// (nil for each it lacks, and for all when obj is not an object), in one
// pass; the first of each name counts.
func objectMembers3(obj []byte, a, b, c string) (va, vb, vc []byte) {
	if len(obj) == 0 || obj[0] != '{' {
		return nil, nil, nil
	}
	eachMember(obj, func(n, v []byte) bool {
		switch string(n) {
		case a:
			if va == nil {
				va = v
			}
		case b:
			if vb == nil {
				vb = v
			}
		case c:
			if vc == nil {
				vc = v
			}
		}
		return true
	})
	return va, vb, vc
}

// buildResource builds the resource of resourceOf from the syslog
// appname, hostname and procid, the record's source and the peer's pid.
func (e *lineEncoder) buildResource(appname, source, hostname, procid []byte, pid int64, pidOK bool) (usedSource bool) {
	r := e.res[:0]
	if s, ok := e.stringOf(appname); ok && len(s) > 0 {
		r = appendKVString(r, otlpwire.ResourceAttributes, "service.name", s)
	} else if s, ok := e.stringOf(source); ok && len(s) > 0 {
		r = appendKVString(r, otlpwire.ResourceAttributes, "service.name", s)
		usedSource = true
	}
	if s, ok := e.stringOf(hostname); ok && len(s) > 0 {
		r = appendKVString(r, otlpwire.ResourceAttributes, "host.name", s)
	} else if e.hostname != "" {
		r = appendKVString(r, otlpwire.ResourceAttributes, "host.name", []byte(e.hostname))
	}
	if s, ok := e.stringOf(procid); ok {
		if n, err := strconv.ParseInt(string(s), 10, 64); err == nil {
			pid, pidOK = n, true
		}
	}
	if pidOK {
		r = appendKVInt(r, otlpwire.ResourceAttributes, "process.pid", pid)
	}
	e.res = r
	return usedSource
}

// scopeOf builds the InstrumentationScope of a record from OTLP.
func (e *lineEncoder) scopeOf(scope []byte) {
	s := e.scope[:0]
	if v, ok := e.stringOf(objectMember(scope, "name")); ok {
		s = appendStringField(s, otlpwire.ScopeName, v)
	}
	if v, ok := e.stringOf(objectMember(scope, "version")); ok {
		s = appendStringField(s, otlpwire.ScopeVersion, v)
	}
	if a := objectMember(scope, "attributes"); len(a) > 0 && a[0] == '{' {
		s = e.keyValues(s, otlpwire.ScopeAttributes, a, 0)
	}
	e.scope = s
}

// file puts the record into the group of its resource and scope: most
// often the previous record's.
func (e *lineEncoder) file() {
	if i := e.last; i >= 0 && bytes.Equal(e.groups[i].res, e.res) && bytes.Equal(e.groups[i].scope, e.scope) {
		e.fileIn(&e.groups[i])
		return
	}
	key := len(e.res)
	e.str = append(append(append(e.str[:0], e.res...), 0xff), e.scope...)
	i, ok := e.index[string(e.str)]
	if !ok {
		i = len(e.groups)
		if i < cap(e.groups) {
			e.groups = e.groups[:i+1]
		} else {
			e.groups = append(e.groups, group{})
		}
		g := &e.groups[i]
		g.res = append(g.res[:0], e.str[:key]...)
		g.scope = append(g.scope[:0], e.scope...)
		e.index[string(e.str)] = i
	}
	e.last = i
	e.fileIn(&e.groups[i])
}

// fileIn appends the record to group g.
func (e *lineEncoder) fileIn(g *group) {
	g.recs = append(appendLen(g.recs, otlpwire.ScopeLogsLogRecords, len(e.rec)), e.rec...)
	g.n++
}

// request appends the ExportLogsServiceRequest of every record added
// since reset.
func (e *lineEncoder) request(b []byte) []byte {
	// Every length is known beforehand: the records are copied once.
	for i := range e.groups {
		g := &e.groups[i]
		sl := len(g.recs)
		if len(g.scope) > 0 {
			sl += fieldSize(otlpwire.ScopeLogsScope, len(g.scope))
		}
		rl := fieldSize(otlpwire.ResourceLogsScopeLogs, sl)
		if len(g.res) > 0 {
			rl += fieldSize(otlpwire.ResourceLogsResource, len(g.res))
		}
		b = appendLen(b, otlpwire.RequestResourceLogs, rl)
		if len(g.res) > 0 {
			b = append(appendLen(b, otlpwire.ResourceLogsResource, len(g.res)), g.res...)
		}
		b = appendLen(b, otlpwire.ResourceLogsScopeLogs, sl)
		if len(g.scope) > 0 {
			b = append(appendLen(b, otlpwire.ScopeLogsScope, len(g.scope)), g.scope...)
		}
		b = append(b, g.recs...)
	}
	return b
}

// fieldSize is the size of length-delimited field num holding n bytes.
func fieldSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendLen appends the tag and length of length-delimited field num
// holding n bytes; the caller appends them.
func appendLen(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

// attr adds a top-level member as an attribute of its name.
func (e *lineEncoder) attr(name, val []byte) {
	b, kv := beginMsg(e.attrs, otlpwire.LogAttributes)
	b = appendStringField(b, otlpwire.KeyValueKey, name)
	b, av := beginMsg(b, otlpwire.KeyValueValue)
	b = e.anyValue(b, val, 0)
	b = endMsg(b, av)
	e.attrs = endMsg(b, kv)
}

// flattenExcept adds the members of object obj but skip as attributes
// named e.key plus "." and their path, objects flattened further, other
// values as they are.
func (e *lineEncoder) flattenExcept(obj []byte, skip string) {
	prefix := len(e.key)
	eachMember(obj, func(name, val []byte) bool {
		if skip != "" && string(name) == skip {
			return true
		}
		e.flattenMember(prefix, name, val)
		return true
	})
	e.key = e.key[:prefix]
}

// flattenMember adds member name of an object whose path is e.key[:prefix]:
// an object is flattened further, any other value is one attribute.
func (e *lineEncoder) flattenMember(prefix int, name, val []byte) {
	e.key = append(append(e.key[:prefix], '.'), e.name(name)...)
	if val[0] == '{' && len(e.key) < 256 {
		e.flattenExcept(val, "")
	} else {
		b, kv := beginMsg(e.attrs, otlpwire.LogAttributes)
		b = appendStringField(b, otlpwire.KeyValueKey, e.key)
		b, av := beginMsg(b, otlpwire.KeyValueValue)
		b = e.anyValue(b, val, 0)
		b = endMsg(b, av)
		e.attrs = endMsg(b, kv)
	}
	e.key = e.key[:prefix]
}

// keyValues appends the members of JSON object obj as KeyValue fields num.
func (e *lineEncoder) keyValues(b []byte, num protowire.Number, obj []byte, depth int) []byte {
	eachMember(obj, func(name, val []byte) bool {
		var kv, av int
		b, kv = beginMsg(b, num)
		b = appendStringField(b, otlpwire.KeyValueKey, e.name(name))
		b, av = beginMsg(b, otlpwire.KeyValueValue)
		b = e.anyValue(b, val, depth+1)
		b = endMsg(b, av)
		b = endMsg(b, kv)
		return true
	})
	return b
}

// maxDepth bounds the nesting the encoder follows; deeper values are sent
// as their JSON text. The aggregator's encoder accepts 128 levels.
const maxDepth = 128

// anyValue appends the fields of an AnyValue for the JSON value v: strings,
// true/false, integers (a number without fraction or exponent that fits
// 64 bits), other numbers as doubles, arrays, objects as key-value lists;
// null leaves the AnyValue empty.
func (e *lineEncoder) anyValue(b, v []byte, depth int) []byte {
	if len(v) == 0 {
		return b
	}
	switch c := v[0]; c {
	case '"':
		s, ok := e.stringOf(v)
		if !ok {
			s = v
		}
		return appendStringField(b, otlpwire.AnyString, s)
	case 't', 'f':
		b = protowire.AppendTag(b, otlpwire.AnyBool, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(c == 't'))
	case 'n':
		return b
	case '{', '[':
		if depth >= maxDepth {
			return appendStringField(b, otlpwire.AnyString, v)
		}
		num := protowire.Number(otlpwire.AnyKVList)
		if c == '[' {
			num = otlpwire.AnyArray
		}
		b, l := beginMsg(b, num)
		if c == '{' {
			b = e.keyValues(b, otlpwire.ListValues, v, depth)
		} else {
			eachElement(v, func(x []byte) bool {
				var av int
				b, av = beginMsg(b, otlpwire.ListValues)
				b = e.anyValue(b, x, depth+1)
				b = endMsg(b, av)
				return true
			})
		}
		return endMsg(b, l)
	default:
		if n, ok := intOf(v); ok {
			b = protowire.AppendTag(b, otlpwire.AnyInt, protowire.VarintType)
			return protowire.AppendVarint(b, uint64(n))
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return appendStringField(b, otlpwire.AnyString, v)
		}
		b = protowire.AppendTag(b, otlpwire.AnyDouble, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(f))
	}
}

// timeOf parses a JSON string holding an RFC 3339 time into Unix ns.
func (e *lineEncoder) timeOf(v []byte) (uint64, bool) {
	s, ok := e.stringOf(v)
	if !ok || len(s) == 0 {
		return 0, false
	}
	if ns, ok := e.ts.within(s); ok {
		return uint64(ns), ns > 0
	}
	t, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil || t.UnixNano() <= 0 {
		return 0, false
	}
	if ok := len(s) > secondsLen && s[len(s)-1] == 'Z'; ok {
		e.ts.prefix = append(e.ts.prefix[:0], s[:secondsLen]...)
		e.ts.sec = t.Unix()
	}
	return uint64(t.UnixNano()), true
}

// secondsLen is the length of an RFC 3339 time up to its seconds.
const secondsLen = len("2006-01-02T15:04:05")

// within reads s, an RFC 3339 time, when it is in the cached second and
// in UTC: the cached text, then Z or a fraction of one to nine digits and
// Z.
func (c *tsCache) within(s []byte) (int64, bool) {
	if len(c.prefix) != secondsLen || len(s) <= secondsLen || !bytes.Equal(s[:secondsLen], c.prefix) {
		return 0, false
	}
	rest := s[secondsLen:]
	if len(rest) == 1 && rest[0] == 'Z' {
		return c.sec * 1e9, true
	}
	if len(rest) < 3 || len(rest) > 11 || rest[0] != '.' || rest[len(rest)-1] != 'Z' {
		return 0, false
	}
	var frac int64
	digits := rest[1 : len(rest)-1]
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, false
		}
		frac = frac*10 + int64(d-'0')
	}
	for range 9 - len(digits) {
		frac *= 10
	}
	return c.sec*1e9 + frac, true
}

// hexOf decodes a JSON string of 2n hex digits.
func (e *lineEncoder) hexOf(v []byte, n int) ([]byte, bool) {
	if len(v) != 2*n+2 || v[0] != '"' {
		return nil, false
	}
	if _, err := hex.Decode(e.id[:n], v[1:len(v)-1]); err != nil {
		return nil, false
	}
	return e.id[:n], true
}

// intOf reads a JSON integer (digits, an optional minus, no fraction or
// exponent) that fits 64 bits.
func intOf(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	d := v
	if neg {
		d = v[1:]
	}
	if len(d) == 0 || len(d) > 19 {
		if len(d) > 19 {
			n, err := strconv.ParseInt(string(v), 10, 64) // 19 digits and more: near the limits
			return n, err == nil
		}
		return 0, false
	}
	var n int64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if n < 0 { // 19 digits past MaxInt64
		n2, err := strconv.ParseInt(string(v), 10, 64)
		return n2, err == nil
	}
	if neg {
		n = -n
	}
	return n, true
}

// stringOf returns the contents of JSON string v, unescaped (in e.str
// when it had escapes: valid until the next call).
func (e *lineEncoder) stringOf(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	s := v[1 : len(v)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return s, true
	}
	e.str = unescape(e.str[:0], s)
	return e.str, true
}

// unescape appends JSON string contents s without their escapes.
func unescape(dst, s []byte) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			dst = append(dst, c)
			continue
		}
		i++
		switch s[i] {
		case 'n':
			dst = append(dst, '\n')
		case 't':
			dst = append(dst, '\t')
		case 'r':
			dst = append(dst, '\r')
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'u':
			if i+4 >= len(s) {
				return dst
			}
			r := hexRune(s[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if r2 := hexRune(s[i+3 : i+7]); utf16.DecodeRune(r, r2) != utf8.RuneError {
					r = utf16.DecodeRune(r, r2)
					i += 6
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, s[i])
		}
	}
	return dst
}

func hexRune(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return utf8.RuneError
		}
	}
	return r
}
