package otlp

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ipclab/logagg/internal/jsonstr"
	"github.com/ipclab/logagg/internal/otlpwire"
	"github.com/ipclab/logagg/internal/record"
)

// Causes of a refused request, the "cause" label of
// logagg_requests_refused_total, and of rejected records.
const (
	CauseMalformed     = "malformed"     // not a valid ExportLogsServiceRequest (protobuf or JSON)
	CauseBadID         = "bad_id"        // a trace or span id of the wrong length (the Collector refuses those too)
	CauseInvalidUTF8   = "invalid_utf8"  // a string field that is not UTF-8 (protobuf requires it)
	CauseTooDeep       = "too_deep"      // a value nested deeper than MaxDepth
	CauseTooLarge      = "too_large"     // a request over max_request (HTTP 413, gRPC RESOURCE_EXHAUSTED)
	CauseContentType   = "content_type"  // an HTTP body that is neither protobuf nor JSON (415)
	CauseEncoding      = "encoding"      // a Content-Encoding we do not read, or a body that does not decompress
	CauseTimeout       = "timeout"       // a client too slow to send its request
	CauseBackpressure  = "backpressure"  // the receiver's budget of records in flight was spent (429, RESOURCE_EXHAUSTED)
	CauseStopping      = "stopping"      // the aggregator is shutting down (503, UNAVAILABLE)
	CauseMethod        = "method"        // a wrong HTTP method or path
	CauseRecordSize    = "record_size"   // one record over max_record, rejected alone (partial success)
	CauseNotWritten    = "not_written"   // acknowledged mode: the client left before the records were written
	CauseInternal      = "internal"      // anything else gRPC refused before the request reached us
	CauseCancelled     = "cancelled"     // the client cancelled
	CauseUnimplemented = "unimplemented" // a gRPC method we do not serve
	CauseTLS           = "tls"           // a TLS handshake that failed: no client certificate the CAs accept, plain text, ...
)

// DefaultMaxDepth bounds how deeply AnyValues (maps and lists) may nest.
// The output's JSON scanner allows 128 levels, and a record puts up to
// four levels of its own around a value (record, attributes, scope,
// attributes); nothing that real programs log comes near 32.
const DefaultMaxDepth = 32

// DecodeError is why a request was refused whole.
type DecodeError struct {
	Cause string // one of the Cause constants
	Msg   string
}

func (e *DecodeError) Error() string { return e.Msg }

func malformed(format string, a ...any) error {
	return &DecodeError{Cause: CauseMalformed, Msg: fmt.Sprintf(format, a...)}
}

var errTruncated = &DecodeError{Cause: CauseMalformed, Msg: "truncated or malformed protobuf"}

// Decoder renders the LogRecords of an ExportLogsServiceRequest as JSON
// objects, one per record (the payloads the sink encodes): see
// docs/records.md for the mapping. A request that is not well formed
// (malformed protobuf, a string that is not UTF-8, a value nested deeper
// than MaxDepth, a trace or span id of the wrong length) is refused whole;
// a record whose rendering is longer than MaxRecord is left out and
// counted in Rejected, the rest kept (partial success).
//
// A Decoder is reused request after request and is not safe for
// concurrent use; it allocates nothing once its buffers have grown.
type Decoder struct {
	MaxRecord int // longest payload kept (0: no limit)
	MaxDepth  int // deepest AnyValue nesting (0: DefaultMaxDepth)

	buf   []byte // the payloads, back to back
	ends  []int
	flags []record.Flags
	// Rejected counts the records left out; RejectMsg says why (the
	// first one, and how many).
	Rejected  int
	RejectMsg string

	res    []byte // ,"resource":{…} of the current ResourceLogs, or empty
	source []byte // ,"source":"…" (its service.name), or empty
	scope  []byte // ,"scope":{…} of the current ScopeLogs, or empty
	found  jsonstr.Found
	nrec   int // records seen in this request (for messages)

	timeSec  int64  // the second timeText renders
	timeText []byte // its RFC 3339 text, without fraction and zone
}

// Len is the number of payloads of the last Decode.
func (d *Decoder) Len() int { return len(d.ends) }

// Payload returns payload i of the last Decode, and the flags of what its
// rendering escaped (NUL and control bytes); valid until the next Decode.
func (d *Decoder) Payload(i int) ([]byte, record.Flags) {
	start := 0
	if i > 0 {
		start = d.ends[i-1]
	}
	return d.buf[start:d.ends[i]], d.flags[i]
}

// Bytes is the total size of the payloads of the last Decode.
func (d *Decoder) Bytes() int { return len(d.buf) }

// Decode renders every LogRecord of req. On error nothing may be used.
func (d *Decoder) Decode(req []byte) error {
	d.buf, d.ends, d.flags = d.buf[:0], d.ends[:0], d.flags[:0]
	d.Rejected, d.RejectMsg, d.nrec = 0, "", 0
	if d.MaxDepth <= 0 {
		d.MaxDepth = DefaultMaxDepth
	}
	err := eachField(req, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != otlpwire.RequestResourceLogs {
			return nil
		}
		if typ != protowire.BytesType {
			return nil // a known field of another wire type is an unknown field (protobuf-go reads it so)
		}
		return d.resourceLogs(v)
	})
	if err != nil {
		d.buf, d.ends, d.flags = d.buf[:0], d.ends[:0], d.flags[:0]
		return err
	}
	if d.Rejected > 0 {
		if d.Rejected > 1 {
			d.RejectMsg += fmt.Sprintf(" (and %d more records)", d.Rejected-1)
		}
	}
	return nil
}

// eachField calls fn with every field of message b, in order; a varint is
// passed as its encoding.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errTruncated
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n >= 0 {
				v = b[:n]
			}
		}
		if n < 0 {
			return errTruncated
		}
		b = b[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// fieldIter walks the fields of a message without a call per field: the
// hot paths (a record's fields, key-values, values) use it; eachField
// serves the rest.
type fieldIter struct {
	b   []byte
	bad bool
}

// next returns the next field (a varint as its encoding); false at the end
// of the message, or when it is malformed (bad is then set).
func (it *fieldIter) next() (num protowire.Number, typ protowire.Type, v []byte, ok bool) {
	b := it.b
	if len(b) == 0 {
		return 0, 0, nil, false
	}
	var n int
	if c := b[0]; c < 0x80 { // a one-byte tag: fields 1 to 15
		num, typ, n = protowire.Number(c>>3), protowire.Type(c&7), 1
		if num == 0 {
			it.bad = true
			return 0, 0, nil, false
		}
	} else if num, typ, n = protowire.ConsumeTag(b); n < 0 {
		it.bad = true
		return 0, 0, nil, false
	}
	b = b[n:]
	switch {
	case typ == protowire.BytesType && len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b): // a short length
		l := int(b[0])
		v, n = b[1:1+l], 1+l
	case typ == protowire.BytesType:
		v, n = protowire.ConsumeBytes(b)
	default:
		if n = protowire.ConsumeFieldValue(num, typ, b); n >= 0 {
			v = b[:n]
		}
	}
	if n < 0 {
		it.bad = true
		return 0, 0, nil, false
	}
	it.b = b[n:]
	return num, typ, v, true
}

// resourceLogs renders one ResourceLogs: its resource first, wherever it
// stands in the message, then its scope logs.
func (d *Decoder) resourceLogs(b []byte) error {
	d.res, d.source = d.res[:0], d.source[:0]
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != otlpwire.ResourceLogsResource {
			return nil
		}
		if typ != protowire.BytesType {
			return nil // a known field of another wire type is an unknown field (protobuf-go reads it so)
		}
		return d.resource(v)
	})
	if err != nil {
		return err
	}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != otlpwire.ResourceLogsScopeLogs && num != otlpwire.ResourceLogsInstrumentationLibraryLogs {
			return nil
		}
		if typ != protowire.BytesType {
			return nil // a known field of another wire type is an unknown field (protobuf-go reads it so)
		}
		return d.scopeLogs(v)
	})
}

// resource renders ,"resource":{attributes} and finds service.name.
func (d *Decoder) resource(b []byte) error {
	d.res = append(d.res[:0], `,"resource":{`...)
	n := 0
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != otlpwire.ResourceAttributes {
			return nil
		}
		if typ != protowire.BytesType {
			return nil // a known field of another wire type is an unknown field (protobuf-go reads it so)
		}
		if n > 0 {
			d.res = append(d.res, ',')
		}
		n++
		var err error
		var key, val []byte
		d.res, key, val, err = d.appendKeyValue(d.res, v, 1)
		if err == nil && string(key) == "service.name" && len(val) > 0 && val[0] == '"' {
			d.source = append(append(d.source[:0], `,"source":`...), val...)
		}
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		d.res = d.res[:0]
		return nil
	}
	d.res = append(d.res, '}')
	return nil
}

// scopeLogs renders the records of one ScopeLogs, each with its scope.
func (d *Decoder) scopeLogs(b []byte) error {
	d.scope = d.scope[:0]
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != otlpwire.ScopeLogsScope {
			return nil
		}
		if typ != protowire.BytesType {
			return nil // a known field of another wire type is an unknown field (protobuf-go reads it so)
		}
		return d.renderScope(v)
	})
	if err != nil {
		return err
	}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != otlpwire.ScopeLogsLogRecords {
			return nil
		}
		if typ != protowire.BytesType {
			return nil // a known field of another wire type is an unknown field (protobuf-go reads it so)
		}
		return d.logRecord(v)
	})
}

// renderScope renders ,"scope":{"name":…,"version":…,"attributes":{…}},
// leaving out what is empty.
func (d *Decoder) renderScope(b []byte) error {
	var name, version []byte
	nattr := 0
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case otlpwire.ScopeName, otlpwire.ScopeVersion:
			if typ != protowire.BytesType {
				return nil // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			if !utf8.Valid(v) {
				return &DecodeError{Cause: CauseInvalidUTF8, Msg: "scope name or version is not UTF-8"}
			}
			if num == otlpwire.ScopeName {
				name = v
			} else {
				version = v
			}
		case otlpwire.ScopeAttributes:
			if typ != protowire.BytesType {
				return nil // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			nattr++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(name) == 0 && len(version) == 0 && nattr == 0 {
		return nil
	}
	s := append(d.scope[:0], `,"scope":{`...)
	sep := ""
	if len(name) > 0 {
		s = append(s, `"name":`...)
		s = d.appendString(s, name)
		sep = ","
	}
	if len(version) > 0 {
		s = append(s, sep...)
		s = append(s, `"version":`...)
		s = d.appendString(s, version)
		sep = ","
	}
	if nattr > 0 {
		s = append(s, sep...)
		s = append(s, `"attributes":{`...)
		if s, err = d.appendAttributes(s, b, otlpwire.ScopeAttributes); err != nil {
			return err
		}
		s = append(s, '}')
	}
	d.scope = append(s, '}')
	return nil
}

// logFields are what one pass over a LogRecord finds; attributes are
// rendered by a second pass.
type logFields struct {
	time, observed     uint64
	severity           int64
	hasSeverity        bool
	sevText, eventName []byte
	body               []byte
	hasBody            bool
	nattr              int
	// attrs are the first attributes (KeyValue messages) in order; a
	// record with more than fit is read a second time for them.
	attrs           [maxKeptAttrs][]byte
	dropped         uint64
	flags           uint32
	traceID, spanID []byte
}

// maxKeptAttrs is how many attributes of a LogRecord its one pass over
// the fields keeps for rendering (SDKs' records mostly carry a few).
const maxKeptAttrs = 16

// logRecord renders one LogRecord as one payload.
func (d *Decoder) logRecord(b []byte) error {
	d.nrec++
	var f logFields
	it := fieldIter{b: b}
	for {
		num, typ, v, ok := it.next()
		if !ok {
			break
		}
		switch num {
		case otlpwire.LogTimeUnixNano, otlpwire.LogObservedTimeUnixNano:
			if typ != protowire.Fixed64Type {
				continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			t, _ := protowire.ConsumeFixed64(v)
			if num == otlpwire.LogTimeUnixNano {
				f.time = t
			} else {
				f.observed = t
			}
		case otlpwire.LogSeverityNumber:
			if typ != protowire.VarintType {
				continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			x, _ := protowire.ConsumeVarint(v)
			f.severity, f.hasSeverity = int64(int32(x)), true
		case otlpwire.LogSeverityText, otlpwire.LogEventName:
			if typ != protowire.BytesType {
				continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			if !utf8.Valid(v) {
				return &DecodeError{Cause: CauseInvalidUTF8, Msg: "severity_text or event_name is not UTF-8"}
			}
			if num == otlpwire.LogSeverityText {
				f.sevText = v
			} else {
				f.eventName = v
			}
		case otlpwire.LogBody:
			if typ != protowire.BytesType {
				continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			f.body, f.hasBody = v, true
		case otlpwire.LogAttributes:
			if typ != protowire.BytesType {
				continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			if f.nattr < maxKeptAttrs {
				f.attrs[f.nattr] = v
			}
			f.nattr++
		case otlpwire.LogDroppedAttributeCount:
			if typ != protowire.VarintType {
				continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			f.dropped, _ = protowire.ConsumeVarint(v)
		case otlpwire.LogFlags:
			if typ != protowire.Fixed32Type {
				continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			x, _ := protowire.ConsumeFixed32(v)
			f.flags = x
		case otlpwire.LogTraceID, otlpwire.LogSpanID:
			if typ != protowire.BytesType {
				continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
			}
			want := 16
			if num == otlpwire.LogSpanID {
				want = 8
			}
			if len(v) != 0 && len(v) != want {
				return &DecodeError{Cause: CauseBadID, Msg: fmt.Sprintf("a %s of %d bytes (want %d)", map[bool]string{true: "trace_id", false: "span_id"}[want == 16], len(v), want)}
			}
			if num == otlpwire.LogTraceID {
				f.traceID = v
			} else {
				f.spanID = v
			}
		}
	}
	if it.bad {
		return errTruncated
	}
	start := len(d.buf)
	d.found = 0
	p := append(d.buf, '{')
	sep := ""
	if f.time != 0 {
		p = append(p, `"timestamp":"`...)
		p = d.appendTime(p, f.time)
		p = append(p, '"')
		sep = ","
	}
	if f.observed != 0 {
		p = append(p, sep...)
		p = append(p, `"observed_timestamp":"`...)
		p = d.appendTime(p, f.observed)
		p = append(p, '"')
		sep = ","
	}
	if name := otlpwire.SeverityName(f.severity); name != "" {
		p = append(p, sep...)
		p = append(p, `"level":"`...)
		p = append(p, name...)
		p = append(p, '"')
		sep = ","
	} else if len(f.sevText) > 0 {
		p = append(p, sep...)
		p = append(p, `"level":`...)
		p = d.appendString(p, f.sevText)
		sep = ","
	}
	if f.hasSeverity && f.severity != 0 {
		p = append(p, sep...)
		p = append(p, `"severity_number":`...)
		p = strconv.AppendInt(p, f.severity, 10)
		sep = ","
	}
	if len(f.sevText) > 0 {
		p = append(p, sep...)
		p = append(p, `"severity_text":`...)
		p = d.appendString(p, f.sevText)
		sep = ","
	}
	if f.hasBody {
		p = append(p, sep...)
		sep = ","
		var err error
		if s, ok, serr := stringValue(f.body); serr != nil {
			return serr
		} else if ok {
			p = append(p, `"message":`...)
			p = d.appendString(p, s)
		} else {
			p = append(p, `"body":`...)
			if p, err = d.appendAny(p, f.body, 1); err != nil {
				return err
			}
		}
	}
	if len(d.source) > 0 {
		if sep == "" {
			p = append(p, d.source[1:]...)
		} else {
			p = append(p, d.source...)
		}
		sep = ","
	}
	if len(f.eventName) > 0 {
		p = append(p, sep...)
		p = append(p, `"event_name":`...)
		p = d.appendString(p, f.eventName)
		sep = ","
	}
	if f.nattr > 0 {
		p = append(p, sep...)
		p = append(p, `"attributes":{`...)
		var err error
		if f.nattr > maxKeptAttrs {
			p, err = d.appendAttributes(p, b, otlpwire.LogAttributes)
		} else {
			for i, v := range f.attrs[:f.nattr] {
				if i > 0 {
					p = append(p, ',')
				}
				if p, _, _, err = d.appendKeyValue(p, v, 2); err != nil {
					break
				}
			}
		}
		if err != nil {
			return err
		}
		p = append(p, '}')
		sep = ","
	}
	if f.dropped != 0 {
		p = append(p, sep...)
		p = append(p, `"dropped_attributes_count":`...)
		p = strconv.AppendUint(p, f.dropped, 10)
		sep = ","
	}
	if len(f.traceID) > 0 {
		p = append(p, sep...)
		p = append(p, `"trace_id":"`...)
		p = hex.AppendEncode(p, f.traceID)
		p = append(p, '"')
		sep = ","
	}
	if len(f.spanID) > 0 {
		p = append(p, sep...)
		p = append(p, `"span_id":"`...)
		p = hex.AppendEncode(p, f.spanID)
		p = append(p, '"')
		sep = ","
	}
	if f.flags != 0 {
		p = append(p, sep...)
		p = append(p, `"trace_flags":`...)
		p = strconv.AppendUint(p, uint64(f.flags), 10)
		sep = ","
	}
	for _, part := range [2][]byte{d.res, d.scope} {
		if len(part) == 0 {
			continue
		}
		if sep == "" {
			p = append(p, part[1:]...)
		} else {
			p = append(p, part...)
		}
		sep = ","
	}
	p = append(p, '}')
	if d.MaxRecord > 0 && len(p)-start > d.MaxRecord {
		if d.Rejected == 0 {
			d.RejectMsg = fmt.Sprintf("log record %d renders to %d bytes, over the %d of max_record", d.nrec, len(p)-start, d.MaxRecord)
		}
		d.Rejected++
		d.buf = p[:start]
		return nil
	}
	d.buf = p
	d.ends = append(d.ends, len(p))
	var fl record.Flags
	if d.found&jsonstr.NUL != 0 {
		fl |= record.FlagNUL
	}
	if d.found&jsonstr.Control != 0 {
		fl |= record.FlagControl
	}
	d.flags = append(d.flags, fl)
	return nil
}

// appendAttributes appends the KeyValues in field num of message b (a
// scope's or a record's attributes), comma-separated.
func (d *Decoder) appendAttributes(p, b []byte, num protowire.Number) ([]byte, error) {
	n := 0
	err := eachField(b, func(field protowire.Number, typ protowire.Type, v []byte) error {
		if field != num || typ != protowire.BytesType {
			return nil // another field, or a known one of another wire type: unknown (protobuf-go reads it so)
		}
		if n > 0 {
			p = append(p, ',')
		}
		n++
		var err error
		p, _, _, err = d.appendKeyValue(p, v, 2)
		return err
	})
	return p, err
}

// appendTime appends ns as an RFC 3339 UTC time with nanoseconds, as
// time.RFC3339Nano writes it (trailing zeros of the fraction left out).
// The records of a request mostly share their second: its text is kept.
func (d *Decoder) appendTime(b []byte, ns uint64) []byte {
	if ns > math.MaxInt64 {
		ns = math.MaxInt64
	}
	sec, frac := int64(ns/1e9), int(ns%1e9)
	if sec != d.timeSec || len(d.timeText) == 0 {
		d.timeSec = sec
		d.timeText = time.Unix(sec, 0).UTC().AppendFormat(d.timeText[:0], "2006-01-02T15:04:05")
	}
	b = append(b, d.timeText...)
	if frac != 0 {
		var digits [10]byte
		digits[0] = '.'
		digits[9] = byte('0' + frac%10)
		frac /= 10
		for i := 8; i >= 2; i -= 2 { // two digits at a time
			q := 2 * (frac % 100)
			frac /= 100
			digits[i-1], digits[i] = digitPairs[q], digitPairs[q+1]
		}
		n := 10
		for digits[n-1] == '0' {
			n--
		}
		b = append(b, digits[:n]...)
	}
	return append(b, 'Z')
}

// digitPairs are "00" to "99", back to back.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// appendString appends s, which the caller checked is UTF-8, as a JSON
// string.
func (d *Decoder) appendString(b, s []byte) []byte {
	b = append(b, '"')
	b, f := jsonstr.AppendEscaped(b, s)
	d.found |= f
	return append(b, '"')
}

// stringValue reports whether AnyValue b holds a string (the last value
// field wins, as protobuf reads a oneof), and returns it checked for UTF-8.
func stringValue(b []byte) (s []byte, ok bool, err error) {
	num, typ, v, err := lastValue(b)
	if err != nil || num != otlpwire.AnyString {
		return nil, false, err
	}
	if typ != protowire.BytesType {
		return nil, false, malformed("string_value has wire type %d", typ)
	}
	if !utf8.Valid(v) {
		return nil, false, &DecodeError{Cause: CauseInvalidUTF8, Msg: "a string value is not UTF-8"}
	}
	return v, true, nil
}

// anyWireType is the wire type of each AnyValue field.
var anyWireType = [...]protowire.Type{
	otlpwire.AnyString: protowire.BytesType, otlpwire.AnyBool: protowire.VarintType, otlpwire.AnyInt: protowire.VarintType,
	otlpwire.AnyDouble: protowire.Fixed64Type, otlpwire.AnyArray: protowire.BytesType, otlpwire.AnyKVList: protowire.BytesType,
	otlpwire.AnyBytes: protowire.BytesType,
}

// lastValue finds the value field of AnyValue b that counts: the last one
// (as protobuf reads a oneof) of the right wire type (another is an
// unknown field).
func lastValue(b []byte) (num protowire.Number, typ protowire.Type, v []byte, err error) {
	it := fieldIter{b: b}
	for {
		n, t, x, ok := it.next()
		if !ok {
			break
		}
		if n >= otlpwire.AnyString && n <= otlpwire.AnyBytes && anyWireType[n] == t {
			num, typ, v = n, t, x
		}
	}
	if it.bad {
		return 0, 0, nil, errTruncated
	}
	return num, typ, v, nil
}

// appendKeyValue appends KeyValue b as "key":value and returns the key
// and the rendered value.
func (d *Decoder) appendKeyValue(p, b []byte, depth int) (out, key, val []byte, err error) {
	var value []byte
	hasValue := false
	it := fieldIter{b: b}
	for {
		num, typ, v, ok := it.next()
		if !ok {
			break
		}
		if typ != protowire.BytesType {
			continue // a known field of another wire type is an unknown field (protobuf-go reads it so)
		}
		switch num {
		case otlpwire.KeyValueKey:
			key = v
		case otlpwire.KeyValueValue:
			value, hasValue = v, true
		}
	}
	if it.bad {
		return p, nil, nil, errTruncated
	}
	if !utf8.Valid(key) {
		return p, nil, nil, &DecodeError{Cause: CauseInvalidUTF8, Msg: "an attribute key is not UTF-8"}
	}
	p = d.appendString(p, key)
	p = append(p, ':')
	start := len(p)
	if !hasValue {
		p = append(p, "null"...)
	} else if p, err = d.appendAny(p, value, depth); err != nil {
		return p, nil, nil, err
	}
	return p, key, p[start:], nil
}

// appendAny appends AnyValue b as JSON: a string, true/false, an integer,
// a number (NaN and the infinities as the strings "NaN", "Infinity",
// "-Infinity", as OTLP/JSON writes them), an array, an object, bytes as a
// base64 string; null when it holds no value. depth is the nesting of b.
func (d *Decoder) appendAny(p, b []byte, depth int) ([]byte, error) {
	if depth > d.MaxDepth {
		return p, &DecodeError{Cause: CauseTooDeep, Msg: fmt.Sprintf("a value nested deeper than %d levels", d.MaxDepth)}
	}
	num, typ, v, err := lastValue(b)
	if err != nil {
		return p, err
	}
	want := protowire.BytesType
	switch num {
	case otlpwire.AnyBool, otlpwire.AnyInt:
		want = protowire.VarintType
	case otlpwire.AnyDouble:
		want = protowire.Fixed64Type
	case 0:
		return append(p, "null"...), nil
	}
	if typ != want {
		return p, malformed("AnyValue field %d has wire type %d", num, typ)
	}
	switch num {
	case otlpwire.AnyString:
		if !utf8.Valid(v) {
			return p, &DecodeError{Cause: CauseInvalidUTF8, Msg: "a string value is not UTF-8"}
		}
		return d.appendString(p, v), nil
	case otlpwire.AnyBool:
		x, _ := protowire.ConsumeVarint(v)
		return strconv.AppendBool(p, x != 0), nil
	case otlpwire.AnyInt:
		x, _ := protowire.ConsumeVarint(v)
		return strconv.AppendInt(p, int64(x), 10), nil
	case otlpwire.AnyDouble:
		x, _ := protowire.ConsumeFixed64(v)
		f := math.Float64frombits(x)
		switch {
		case math.IsNaN(f):
			return append(p, `"NaN"`...), nil
		case math.IsInf(f, 1):
			return append(p, `"Infinity"`...), nil
		case math.IsInf(f, -1):
			return append(p, `"-Infinity"`...), nil
		}
		return strconv.AppendFloat(p, f, 'g', -1, 64), nil
	case otlpwire.AnyBytes:
		p = append(p, '"')
		p = base64.StdEncoding.AppendEncode(p, v)
		return append(p, '"'), nil
	case otlpwire.AnyArray:
		return d.appendList(p, v, '[', ']', func(p, x []byte) ([]byte, error) { return d.appendAny(p, x, depth+1) })
	case otlpwire.AnyKVList:
		return d.appendList(p, v, '{', '}', func(p, x []byte) ([]byte, error) {
			p, _, _, err := d.appendKeyValue(p, x, depth+1)
			return p, err
		})
	}
	return p, errors.New("unreachable")
}

// appendList appends the values (field 1) of an ArrayValue or KeyValueList
// v between opening and closing, each appended by elem, comma-separated.
func (d *Decoder) appendList(p, v []byte, opening, closing byte, elem func(p, x []byte) ([]byte, error)) ([]byte, error) {
	p = append(p, opening)
	n := 0
	err := eachField(v, func(num protowire.Number, typ protowire.Type, x []byte) error {
		if num != otlpwire.ListValues || typ != protowire.BytesType {
			return nil // another field, or a known one of another wire type: unknown (protobuf-go reads it so)
		}
		if n > 0 {
			p = append(p, ',')
		}
		n++
		var err error
		p, err = elem(p, x)
		return err
	})
	if err != nil {
		return p, err
	}
	return append(p, closing), nil
}
