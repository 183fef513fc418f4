// Package record turns one received record (its framing already removed) into
// one line of the JSON-lines output, and says what it found on the way.
//
// Output schema (one JSON object per line):
//
//	{ <producer fields>..., "agg": {"recv_ns":…, "transport":"unix", "listener":"unix:///tmp/log.sock",
//	  "format":"json", "peer":{"pid":…, "uid":…, "gid":…, "addr":"…", "via":"kernel"},
//	  "stream":"stdout", "file":"/var/log/app.log", "source_time":"…", "flags":["truncated", …]} }
//
// Producer fields: a JSON object's own members are kept verbatim at the top
// level (the seed's source, timestamp, level and message keep their names;
// unknown members are preserved in order; newlines between tokens of a
// pretty-printed object become spaces so the output stays one line). Syslog
// records become message, level, source, timestamp and a "syslog" object,
// plus producer_id, seq and sent_ns when the RFC 5424 structured data holds
// a seq@32473 element:
//
//	{"message":M, "level":"info", "source":app or else hostname,
//	 "timestamp":"2026-11-23T04:33:41Z", "syslog":{"facility":3, "severity":6,
//	 "hostname":…, "appname":…, "procid":…, "tag":…, "msgid":…, "sd":{…}}, "agg":{…}}
//
// For RFC 3164 the fields are what rsyslog extracts from the same bytes
// (rfc3164.go; rsyslog_diff_test.go checks it on a corpus of real clients):
// message is rsyslog's MSG less the one SP after "tag:", appname its
// programname, procid its procid, tag its syslogtag (the whole TAG, with
// its ':') where that says more than appname and procid do (Docker's
// "dockerd/3f2a1b9c[1234]:", "postfix/smtpd[123]:"), hostname only one the
// payload carried (never the sender's address), timestamp only one the
// payload carried (agg.recv_ns says when it arrived). Members without a
// value are left out; control bytes stay in the message, JSON-escaped.
// The one form read differently from rsyslog, as syslog-ng reads it, is
// srslog's default: a space after the PRI, then an RFC 3339 timestamp
// (rfc3164.go says why).
//
// Plain text becomes message. Malformed JSON is kept whole as
// {"message":<payload>} with format raw and the malformed_json flag; so is
// a payload that is one JSON array or string, flagged json_not_object.
// Everything the aggregator adds lives under the single reserved key "agg",
// so producer fields can never be overwritten by ours: a producer's own
// top-level "agg" member (however spelled) is renamed "producer_agg", its
// value verbatim, and flagged reserved_key. A repeated top-level member
// name (compared unescaped) is flagged duplicate_key and kept. Both stay
// format json.
//
// An Encoder is not safe for concurrent use: each listener goroutine owns one.
package record

import "strconv"

// Format is the input format an Encoder detected for a record.
type Format uint8

const (
	FormatRaw     Format = iota // plain text line
	FormatJSON                  // one JSON object
	FormatRFC3164               // BSD syslog
	FormatRFC5424               // IETF syslog
	numFormats
)

// String returns the name used in the output and in metrics.
func (f Format) String() string {
	switch f {
	case FormatJSON:
		return "json"
	case FormatRFC3164:
		return "rfc3164"
	case FormatRFC5424:
		return "rfc5424"
	default:
		return "raw"
	}
}

// NumFormats is the number of Format values, for per-format counters.
const NumFormats = int(numFormats)

// Flags record what was wrong with a record that was nevertheless kept.
// Each flag's name (Flags.Each, FlagName) is also the "kind" label of
// decode_errors_total, so the output and the metrics use one vocabulary.
type Flags uint16

const (
	FlagTruncated     Flags = 1 << iota // cut at the maximum record size; the rest follows as continuation records or was dropped and counted
	FlagPartial                         // last frame at EOF without a delimiter
	FlagMalformedJSON                   // started with '{' but did not parse; kept as message
	FlagInvalidUTF8                     // invalid UTF-8 replaced by U+FFFD
	FlagNUL                             // contained NUL bytes (escaped)
	FlagSyslogParse                     // started with '<' but did not parse as syslog (kept raw), or had a space after the PRI and no timestamp we read (decoded as rsyslog decodes it)
	FlagReservedKey                     // JSON object used the reserved key "agg" at the top level; renamed producer_agg
	FlagFraming                         // bad RFC 6587 octet count; resynchronised
	FlagControl                         // contained C0 control bytes other than NUL, TAB, LF, CR (escaped); DEL is not one
	FlagDuplicateKey                    // JSON object repeats a top-level member name (compared unescaped); kept verbatim
	FlagNotObject                       // a JSON value other than an object (array, string); kept as message
	FlagContinuation                    // the rest of a frame longer than the maximum record size
	numFlags
)

var flagNames = [...]string{"truncated", "partial", "malformed_json", "invalid_utf8", "nul_bytes", "syslog_parse",
	"reserved_key", "framing", "control_chars", "duplicate_key", "json_not_object", "continuation"}

// FlagName is the name of the flag at bit position bit (0 for
// FlagTruncated), or "" past the last flag.
func FlagName(bit int) string {
	if bit < 0 || bit >= len(flagNames) {
		return ""
	}
	return flagNames[bit]
}

// Each calls fn with the name of every set flag, in bit order.
func (f Flags) Each(fn func(name string)) {
	for i := 0; i < int(len(flagNames)); i++ {
		if f&(1<<i) != 0 {
			fn(flagNames[i])
		}
	}
}

// Names returns the names of the set flags.
func (f Flags) Names() []string {
	var out []string
	f.Each(func(n string) { out = append(out, n) })
	return out
}

// NumFlags is the number of distinct flags, for per-flag counters.
const NumFlags = len(flagNames)

// Peer is what is known about the sending process.
type Peer struct {
	HasCreds bool   // PID/UID/GID are valid
	PID      int32  //
	UID      uint32 //
	GID      uint32 //
	Addr     string // remote address (tcp/udp) or "" for unix sockets
	Via      string // how PID/UID/GID were obtained: "kernel" (SO_PEERCRED, SCM_CREDENTIALS) or "lookup"
}

// Meta is what a listener knows about a record besides its bytes.
//
// Everything except RecvNS normally stays fixed for a connection; after
// changing any of those fields call Prepare, which pre-renders them so the
// per-record cost is one copy.
type Meta struct {
	RecvNS    int64  // receive time, Unix ns
	Transport string // "unix", "unixgram", "tcp", "udp", "fifo", ...
	Listener  string // the listener's URL
	Peer      Peer
	Stream    string // "stdout"/"stderr" for captured children and container logs, else ""
	// File is the path of the file the record was read from (file
	// inputs), rendered as agg.file.
	File string
	// SourceTime is when the source stamped the record, as it wrote it (a
	// container runtime's time of a log line), rendered as
	// agg.source_time. Unlike the fields above it may change from record
	// to record without Prepare.
	SourceTime []byte

	// ParseHostname says whether an RFC 3164 header may carry a HOSTNAME
	// after its timestamp. rsyslog looks for one on its network and stream
	// inputs (imudp, imtcp, imptcp, also on a unix stream socket) and not
	// on the local log socket (imuxsock's default), and so do we: the
	// datagram socket at /dev/log gets "<PRI>timestamp tag: msg" from
	// glibc's syslog(3), logger, journald and Go's log/syslog, without a
	// hostname, and there a tag ended by a space instead of ':' ("<13>Nov
	// 23 04:33:41 myapp started") would be taken for one. Every listener
	// but unixgram sets it. It is not rendered, so Prepare need not be
	// called after changing it.
	ParseHostname bool

	// NoSyslog says a payload that starts with '<' is text, not syslog:
	// the files syslog daemons and programs write carry no <PRI>, and
	// rsyslog's imfile does not parse one either (a line "<b>bold</b>"
	// is a message). Like ParseHostname it is not rendered.
	NoSyslog bool

	// Rendered says every payload is a JSON object the listener rendered
	// itself (the OTLP receivers' decoder): valid UTF-8 JSON on one line,
	// its top-level names distinct and none of them "agg", as FuzzDecode
	// checks. The encoder then copies it instead of reading it again
	// (that reading was 15 % of the daemon's CPU behind an OTLP receiver),
	// and rules find its members with Paths.Find when they need them. Not
	// rendered.
	Rendered bool

	static []byte // rendered by Prepare: ,"transport":…,"listener":…,"peer":{…}
}

// Prepare renders the fixed part of the metadata. It must be called after
// construction and after any change of a field other than RecvNS.
func (m *Meta) Prepare() {
	b := m.static[:0]
	b = append(b, `,"transport":`...)
	b = appendJSONString(b, m.Transport)
	b = append(b, `,"listener":`...)
	b = appendJSONString(b, m.Listener)
	if m.Peer.HasCreds || m.Peer.Addr != "" {
		b = append(b, `,"peer":{`...)
		sep := ""
		if m.Peer.HasCreds {
			b = append(b, `"pid":`...)
			b = strconv.AppendInt(b, int64(m.Peer.PID), 10)
			b = append(b, `,"uid":`...)
			b = strconv.AppendUint(b, uint64(m.Peer.UID), 10)
			b = append(b, `,"gid":`...)
			b = strconv.AppendUint(b, uint64(m.Peer.GID), 10)
			sep = ","
		}
		if m.Peer.Addr != "" {
			b = append(b, sep...)
			b = append(b, `"addr":`...)
			b = appendJSONString(b, m.Peer.Addr)
			sep = ","
		}
		if m.Peer.Via != "" {
			b = append(b, sep...)
			b = append(b, `"via":`...)
			b = appendJSONString(b, m.Peer.Via)
		}
		b = append(b, '}')
	}
	if m.Stream != "" {
		b = append(b, `,"stream":`...)
		b = appendJSONString(b, m.Stream)
	}
	if m.File != "" {
		b = append(b, `,"file":`...)
		b = appendJSONString(b, m.File)
	}
	m.static = b
}

// Result is what Append learned about one record.
type Result struct {
	Format Format
	Flags  Flags
}
