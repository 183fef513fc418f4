package record

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Expectations here follow what rsyslog 8.2302 extracts from the same bytes
// (rsyslog_diff_test.go checks the captured corpus against rsyslogd itself);
// "host" marks a listener with Meta.ParseHostname (all but unixgram), where
// rsyslog looks for a hostname, as opposed to the local datagram socket,
// where it does not.
func TestRFC3164(t *testing.T) {
	recv := time.Unix(0, testRecvNS)
	_, off := recv.Zone()
	zone := time.FixedZone("", off)
	// local is an RFC 3164 timestamp as rsyslog completes it: the receive
	// year and the receive time's UTC offset.
	local := func(mo time.Month, d, h, mi, s int) string {
		return time.Date(recv.Year(), mo, d, h, mi, s, 0, zone).Format(time.RFC3339Nano)
	}
	// The flags a NUL and other control bytes raise (their choice is the
	// JSON string encoder's, not the parser's).
	_, nul := appendJSONStringBytes(nil, []byte{0})
	_, ctl := appendJSONStringBytes(nil, []byte{1})
	type fields = map[string]any
	long := strings.Repeat("a", 600)
	tests := []struct {
		name    string
		payload string
		host    bool
		flags   Flags
		want    fields // top-level members (syslog compared as a whole)
		absent  []string
	}{
		{
			name: "hostname and pid", payload: "<13>Nov 22 21:04:53 vm mytag[4711]: hello world", host: true,
			want: fields{"message": "hello world", "level": "notice", "source": "mytag", "timestamp": local(11, 22, 21, 4, 53),
				"syslog": fields{"facility": "1", "severity": "5", "hostname": "vm", "appname": "mytag", "procid": "4711"}},
		},
		{
			// imuxsock does not parse a hostname: the first word is the TAG.
			name: "the same line on a local socket", payload: "<13>Nov 22 21:04:53 vm mytag[4711]: hello world",
			want: fields{"message": "mytag[4711]: hello world", "source": "vm", "timestamp": local(11, 22, 21, 4, 53),
				"syslog": fields{"facility": "1", "severity": "5", "appname": "vm"}},
		},
		{
			name: "glibc syslog(3) and logger -u (no hostname)", payload: "<30>Nov  2 01:02:03 sshd[99]: Accepted key",
			want: fields{"message": "Accepted key", "level": "info", "source": "sshd", "timestamp": local(11, 2, 1, 2, 3),
				"syslog": fields{"facility": "3", "severity": "6", "appname": "sshd", "procid": "99"}},
		},
		{
			// "sshd[99]:" cannot be a hostname ('[' ends it, no SP follows).
			name: "no hostname on a network listener", payload: "<30>Nov  2 01:02:03 sshd[99]: Accepted key", host: true,
			want: fields{"message": "Accepted key", "source": "sshd",
				"syslog": fields{"facility": "3", "severity": "6", "appname": "sshd", "procid": "99"}},
		},
		{
			name: "the RFC's example", payload: "<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8", host: true,
			want: fields{"message": "'su root' failed for lonvick on /dev/pts/8", "level": "crit", "source": "su",
				"syslog": fields{"facility": "4", "severity": "2", "hostname": "mymachine", "appname": "su"}},
		},
		{
			name: "RFC 3339 timestamp", payload: "<11>2025-01-02T03:04:05+01:00 host app: m", host: true,
			want: fields{"message": "m", "level": "err", "source": "app", "timestamp": "2025-01-02T03:04:05+01:00",
				"syslog": fields{"facility": "1", "severity": "3", "hostname": "host", "appname": "app"}},
		},
		{
			name: "RSYSLOG_ForwardFormat: RFC 3339 with microseconds", payload: "<182>2026-11-23T04:37:27.246351+00:00 vm rsapp[4242]: hi", host: true,
			want: fields{"message": "hi", "level": "info", "source": "rsapp", "timestamp": "2026-11-23T04:37:27.246351Z",
				"syslog": fields{"facility": "22", "severity": "6", "hostname": "vm", "appname": "rsapp", "procid": "4242"}},
		},
		{
			name: "RFC 3339 with Z and a short fraction", payload: "<11>2025-01-02T03:04:05.5Z host app: m", host: true,
			want: fields{"message": "m", "timestamp": "2025-01-02T03:04:05.5Z"},
		},
		{
			name: "RFC 3339 with a negative half-hour offset", payload: "<11>2025-01-02T03:04:05.123-05:30 h a: m", host: true,
			want: fields{"message": "m", "source": "a", "timestamp": "2025-01-02T03:04:05.123-05:30"},
		},
		{
			name: "RFC 3339 leap second rolls over", payload: "<11>2016-12-31T23:59:60Z h a: m", host: true,
			want: fields{"timestamp": "2017-01-01T00:00:00Z"},
		},
		{
			// What Python's SysLogHandler sends: no timestamp, the NUL it
			// appends is dropped. rsyslog uses the receive time; we leave
			// "timestamp" out (agg.recv_ns has it).
			name: "Python SysLogHandler", payload: "<158>pyapp[1]: hi\x00",
			want: fields{"message": "hi", "level": "info", "source": "pyapp",
				"syslog": fields{"facility": "19", "severity": "6", "appname": "pyapp", "procid": "1"}},
			absent: []string{"timestamp"},
		},
		{
			name: "Python SysLogHandler over UDP", payload: "<158>pyapp[1]: hi\x00", host: true,
			want: fields{"message": "hi", "source": "pyapp",
				"syslog": fields{"facility": "19", "severity": "6", "appname": "pyapp", "procid": "1"}},
			absent: []string{"timestamp"},
		},
		{
			name: "no timestamp, tag without pid", payload: "<158>pyapp: x",
			want: fields{"message": "x", "source": "pyapp", "syslog": fields{"facility": "19", "severity": "6", "appname": "pyapp"}},
		},
		{
			name: "PRI and a bare word on a local socket: the word is the tag", payload: "<158>x",
			want: fields{"message": "", "source": "x", "syslog": fields{"facility": "19", "severity": "6", "appname": "x"}},
		},
		{
			// rsyslog takes a payload that ends after hostname bytes as a
			// hostname.
			name: "PRI and a bare word on a network listener: the word is the hostname", payload: "<158>x", host: true,
			want: fields{"message": "", "source": "x", "syslog": fields{"facility": "19", "severity": "6", "hostname": "x"}},
		},
		{
			name: "PRI and bare text on a network listener", payload: "<13>hello big world", host: true,
			want: fields{"message": "world", "source": "big", "syslog": fields{"facility": "1", "severity": "5", "hostname": "hello", "appname": "big"}},
		},
		{
			name: "trailing NUL dropped", payload: "<158>Nov 23 04:33:41 pyapp[1]: c\x00",
			want: fields{"message": "c", "source": "pyapp", "timestamp": local(11, 23, 4, 33, 41)},
		},
		{
			name: "ANSI colour escape kept", payload: "<14>Nov 23 04:33:41 app[1]: \x1b[31mred\x1b[0m", flags: ctl,
			want: fields{"message": "\x1b[31mred\x1b[0m", "source": "app", "syslog": fields{"facility": "1", "severity": "6", "appname": "app", "procid": "1"}},
		},
		{
			name: "\\x01 and DEL kept", payload: "<14>Nov 23 04:33:41 app: a\x01b\x7fc", flags: ctl,
			want: fields{"message": "a\x01b\x7fc"},
		},
		{name: "TAB kept", payload: "<14>Nov 23 04:33:41 app: a\tb", want: fields{"message": "a\tb"}},
		{
			// rsyslog turns an inner NUL into "#000" (its strings end at
			// NUL); we keep the byte, escaped.
			name: "inner NUL kept", payload: "<13>Nov 22 21:04:53 vm a: x\x00y", host: true, flags: nul,
			want: fields{"message": "x\x00y", "source": "a"},
		},
		{name: "invalid UTF-8", payload: "<13>Nov 22 21:04:53 vm a: caf\xe9", host: true, flags: FlagInvalidUTF8, want: fields{"message": "caf\ufffd"}},
		{name: "multi-line (octet counted)", payload: "<13>Nov 22 21:04:53 vm a: line1\nline2", host: true, want: fields{"message": "line1\nline2"}},
		{
			// Go's log/syslog Info(""): its newline is the framer's.
			name: "empty body after tag[pid]: and SP", payload: "<14>Nov 23 04:33:41 app[8021]: ",
			want: fields{"message": "", "source": "app", "syslog": fields{"facility": "1", "severity": "6", "appname": "app", "procid": "8021"}},
		},
		{name: "empty body after tag:", payload: "<14>Nov 23 04:33:41 app:", want: fields{"message": "", "source": "app"}},
		{name: "empty body after hostname and tag:", payload: "<13>Nov 22 21:04:53 vm mytag: ", host: true, want: fields{"message": "", "source": "mytag"}},
		{
			name: "timestamp only", payload: "<13>Nov 22 21:04:53", host: true,
			want: fields{"message": "", "timestamp": local(11, 22, 21, 4, 53), "syslog": fields{"facility": "1", "severity": "5"}}, absent: []string{"source"},
		},
		{
			name: "PRI only", payload: "<13>",
			want: fields{"message": "", "level": "notice", "syslog": fields{"facility": "1", "severity": "5"}}, absent: []string{"source", "timestamp"},
		},
		{
			name: "headerless JSON after the PRI", payload: `<14>{"a":1}`, host: true,
			want: fields{"message": `{"a":1}`, "syslog": fields{"facility": "1", "severity": "6"}}, absent: []string{"source", "timestamp"},
		},
		{name: "headerless bracket after blanks", payload: "<14> [x] y", host: true, want: fields{"message": "[x] y"}, absent: []string{"source"}},
		{
			// programname stops at '/' (rsyslog's default); procid comes
			// from the whole TAG, which says more and is kept.
			name: "tag with a slash", payload: "<22>Nov 23 04:33:41 mail postfix/smtpd[123]: connect from x", host: true,
			want: fields{"message": "connect from x", "source": "postfix",
				"syslog": fields{"facility": "2", "severity": "6", "hostname": "mail", "appname": "postfix", "procid": "123", "tag": "postfix/smtpd[123]:"}},
		},
		{name: "tag ended by SP", payload: "<13>Nov 23 04:33:41 host myapp started ok", host: true, want: fields{"message": "started ok", "source": "myapp"}},
		{
			name: "IP address hostname", payload: "<13>Nov 23 04:33:41 192.0.2.10 app: m", host: true,
			want: fields{"syslog": fields{"facility": "1", "severity": "5", "hostname": "192.0.2.10", "appname": "app"}},
		},
		{
			name: "Cisco: year in the hour's place, colon after the time", payload: "<189>Nov 23 2026 04:33:41: %SYS-5-CONFIG_I: Configured", host: true,
			want: fields{"message": "Configured", "source": "%SYS-5-CONFIG_I", "timestamp": time.Date(2026, 11, 23, 4, 33, 41, 0, zone).Format(time.RFC3339Nano)},
		},
		{
			name: "Brocade: year before the month", payload: "<13>2025 Nov 23 04:33:41 host app: m", host: true,
			want: fields{"message": "m", "source": "app", "timestamp": time.Date(2025, 11, 23, 4, 33, 41, 0, zone).Format(time.RFC3339Nano)},
		},
		{
			// rsyslog does not count the SP after a leading year, so it
			// believes one more byte follows the time and rejects the
			// timestamp when the payload ends there.
			name: "year before the month at the end of the payload", payload: "<13>2025 Nov 23 04:33:41",
			want: fields{"message": "Nov 23 04:33:41", "source": "2025"}, absent: []string{"timestamp"},
		},
		{name: "HP ProCurve: SP before the timestamp", payload: "<13> Nov 23 04:33:41 host app: m", host: true, want: fields{"message": "m", "timestamp": local(11, 23, 4, 33, 41)}},
		{name: "lower-case month, fraction", payload: "<13>nov 23 04:33:41.25 host app: m", host: true, want: fields{"message": "m", "timestamp": time.Date(recv.Year(), 11, 23, 4, 33, 41, 250000000, zone).Format(time.RFC3339Nano)}},
		{
			// The TAG holds at most 510 bytes before its ':'; the rest is
			// message.
			name: "very long tag", payload: "<13>Nov 23 04:33:41 " + long + ": m",
			want: fields{"message": long[510:] + ": m", "source": long[:510]},
		},
		{name: "tag with unclosed bracket has no procid", payload: "<13>app[12: m", want: fields{"message": "m", "syslog": fields{"facility": "1", "severity": "5", "appname": "app", "tag": "app[12:"}}},
		{name: "procid [-] is no procid", payload: "<13>app[-]: m", want: fields{"syslog": fields{"facility": "1", "severity": "5", "appname": "app"}}},
		{name: "empty procid", payload: "<13>app[]: m", want: fields{"syslog": fields{"facility": "1", "severity": "5", "appname": "app"}}},
		{name: "non-ASCII ends the programname", payload: "<13>caf\xc3\xa9[1]: m", want: fields{"source": "caf", "syslog": fields{"facility": "1", "severity": "5", "appname": "caf", "procid": "1", "tag": "café[1]:"}}},
		// The TAG is kept whole (syslog.tag) where it says more than
		// appname and procid: Docker's syslog driver names the container
		// there.
		{
			name: "Docker's default tag on a local socket", payload: "<30>Nov 26 21:03:52 dockerd/3f2a1b9c[1234]: hello",
			want: fields{"message": "hello", "source": "dockerd",
				"syslog": fields{"facility": "3", "severity": "6", "appname": "dockerd", "procid": "1234", "tag": "dockerd/3f2a1b9c[1234]:"}},
		},
		{
			name: "Docker's default tag on a network listener", payload: "<30>Nov 26 21:03:52 dockerd/3f2a1b9c[1234]: hello", host: true,
			want: fields{"message": "hello", "source": "dockerd",
				"syslog": fields{"facility": "3", "severity": "6", "appname": "dockerd", "procid": "1234", "tag": "dockerd/3f2a1b9c[1234]:"}},
		},
		{
			name: "an app/sub tag after a hostname", payload: "<30>Nov 26 21:03:52 myhost docker/web-1[99]: second", host: true,
			want: fields{"message": "second", "source": "docker",
				"syslog": fields{"facility": "3", "severity": "6", "hostname": "myhost", "appname": "docker", "procid": "99", "tag": "docker/web-1[99]:"}},
		},
		{name: "a tag that is the app name", payload: "<13>app: m", want: fields{"syslog": fields{"facility": "1", "severity": "5", "appname": "app"}}},
		{name: "a tag ended by SP", payload: "<13>app m", want: fields{"syslog": fields{"facility": "1", "severity": "5", "appname": "app"}}},
		{name: "a tag of app and pid without ':'", payload: "<13>app[7] m", want: fields{"syslog": fields{"facility": "1", "severity": "5", "appname": "app", "procid": "7"}}},
		{name: "a tag with a pid and no name", payload: "<13>Nov 23 04:33:41 [7]: m", want: fields{"syslog": fields{"facility": "1", "severity": "5", "procid": "7"}}},
		{name: "a tag with more after the pid", payload: "<13>app[7]x: m", want: fields{"syslog": fields{"facility": "1", "severity": "5", "appname": "app", "procid": "7", "tag": "app[7]x:"}}},
		{name: "a tag with two pids", payload: "<13>app[7][8]: m", want: fields{"syslog": fields{"facility": "1", "severity": "5", "appname": "app", "procid": "7", "tag": "app[7][8]:"}}},
		// srslog's default format: a space after the PRI, RFC 3339, a
		// hostname (looked for on every listener), the TAG. rsyslog does
		// not read it; syslog-ng does, and so do we.
		{
			name: "srslog's default format", payload: "<166> 2026-11-26T20:59:03Z vm srsapp[16296]: msg", host: true,
			want: fields{"message": "msg", "level": "info", "source": "srsapp", "timestamp": "2026-11-26T20:59:03Z",
				"syslog": fields{"facility": "20", "severity": "6", "hostname": "vm", "appname": "srsapp", "procid": "16296"}},
		},
		{
			name: "srslog's default format on a local socket", payload: "<166> 2026-11-26T20:59:03+01:00 vm srsapp[16296]: msg",
			want: fields{"message": "msg", "source": "srsapp", "timestamp": "2026-11-26T20:59:03+01:00",
				"syslog": fields{"facility": "20", "severity": "6", "hostname": "vm", "appname": "srsapp", "procid": "16296"}},
		},
		{
			name: "srslog's default format with Docker's tag", payload: "<30> 2026-11-26T20:59:03Z vm dockerd/3f2a1b9c[1]: x",
			want: fields{"message": "x", "source": "dockerd",
				"syslog": fields{"facility": "3", "severity": "6", "hostname": "vm", "appname": "dockerd", "procid": "1", "tag": "dockerd/3f2a1b9c[1]:"}},
		},
		{
			name: "srslog's default format, nothing after the timestamp", payload: "<166> 2026-11-26T20:59:03.5Z",
			want: fields{"message": "", "timestamp": "2026-11-26T20:59:03.5Z", "syslog": fields{"facility": "20", "severity": "6"}}, absent: []string{"source"},
		},
		// A space after the PRI and no timestamp we read: decoded as
		// rsyslog decodes it (an empty TAG, the rest is the message), and
		// flagged.
		{
			name: "a space after the PRI, no timestamp", payload: "<166> garbage here: x", host: true, flags: FlagSyslogParse,
			want: fields{"message": "garbage here: x", "syslog": fields{"facility": "20", "severity": "6"}}, absent: []string{"source", "timestamp"},
		},
		{
			name: "a space after the PRI, RFC 3339 without a zone", payload: "<166> 2026-11-26T20:59:03 vm a: x", flags: FlagSyslogParse,
			want: fields{"message": "2026-11-26T20:59:03 vm a: x"}, absent: []string{"source", "timestamp"},
		},
		{
			name: "two spaces before RFC 3339", payload: "<166>  2026-11-26T20:59:03Z vm a: x", host: true, flags: FlagSyslogParse,
			want: fields{"message": " 2026-11-26T20:59:03Z vm a: x"}, absent: []string{"timestamp"},
		},
		{name: "a space after the PRI and nothing else", payload: "<166> ", flags: FlagSyslogParse, want: fields{"message": ""}},
		{name: "trailing CR after a trailing NUL is not removed", payload: "<13>app: m\x00\r", flags: nul, want: fields{"message": "m\x00"}},
		{name: "NUL after CR: both removed", payload: "<13>app: m\r\x00", want: fields{"message": "m"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := testMeta()
			m.ParseHostname = tc.host
			out, res := NewEncoder().Append(nil, []byte(tc.payload), m, 0)
			obj := checkLine(t, out, res, 0)
			if res.Format != FormatRFC3164 || res.Flags != tc.flags {
				t.Fatalf("got %v %v, want rfc3164 %v: %s", res.Format, res.Flags.Names(), tc.flags.Names(), out)
			}
			for k, v := range tc.want {
				if got := normalize(obj[k]); !reflect.DeepEqual(got, normalize(v)) {
					t.Errorf("%s: got %#v, want %#v\n%s", k, got, v, out)
				}
			}
			for _, k := range tc.absent {
				if _, ok := obj[k]; ok {
					t.Errorf("%s present: %s", k, out)
				}
			}
		})
	}
}

// A PRI is "<" 1-3 digits ">" up to 191. rsyslog also accepts "<>" (as 0)
// and leading zeros beyond three digits; we keep such payloads raw, as we
// keep every payload whose PRI is not valid: a leading '<' is more often
// not syslog at all.
func TestRFC3164InvalidPRI(t *testing.T) {
	for _, p := range []string{"<>x", "<0013>x", "<192>x", "<1a>x", "<13", "<", "<html><body>", "<-1>x", "< 13>x"} {
		for _, host := range []bool{false, true} {
			m := testMeta()
			m.ParseHostname = host
			out, res := NewEncoder().Append(nil, []byte(p), m, 0)
			obj := checkLine(t, out, res, 0)
			if res.Format != FormatRaw || res.Flags != FlagSyslogParse || obj["message"] != p || len(obj) != 2 {
				t.Errorf("%q: got %s", p, out)
			}
		}
	}
}

// The parser reports where each part is; the encoder renders from those
// offsets without copying.
func TestRFC3164HeaderOffsets(t *testing.T) {
	p := []byte("<14>Nov 23 04:33:41 host app/x[42]: msg")
	var h rfc3164Header
	if !h.parse(p, true) {
		t.Fatal("not parsed")
	}
	str := func(s span) string { return string(p[s.off:s.end]) }
	got := []string{str(h.ts), str(h.host), str(h.tag), str(h.app), str(h.procid), string(p[h.msg:])}
	want := []string{"Nov 23 04:33:41 ", "host", "app/x[42]:", "app", "42", " msg"}
	if h.pri != 14 || !reflect.DeepEqual(got, want) {
		t.Fatalf("pri %d, parts %q, want 14 %q", h.pri, got, want)
	}
	if s := h.stamp; !s.present || s.hasYear || s.zoned || s.month != 11 || s.day != 23 || s.hour != 4 || s.minute != 33 || s.sec != 41 {
		t.Fatalf("stamp %+v", s)
	}
}

// The RFC 3164 path allocates nothing per record once dst has grown, also
// when every record has a different header (no memo) and when timestamps
// carry zones.
func TestRFC3164ZeroAllocs(t *testing.T) {
	payloads := [][]byte{
		[]byte("<13>Nov 22 21:04:53 vm mytag[4711]: hello world"),
		[]byte("<182>2026-11-23T04:37:27.246351+02:00 vm rsapp[4242]: hi"),
		[]byte("<158>pyapp[1]: hi\x00"),
		[]byte("<14>Nov 23 04:33:41 app[1]: \x1b[31mred"),
		[]byte("<11>2025-01-02T03:04:05.123-05:30 h a: m"),
		[]byte("<22>Nov  3 04:33:41 mail postfix/smtpd[123]: connect from x"),
		[]byte("<166> 2026-11-26T20:59:03+01:00 vm dockerd/3f2a1b9c[16296]: srslog"),
		[]byte("<166> garbage here: x"),
	}
	e := NewEncoder()
	m := testMeta()
	m.ParseHostname = true
	dst := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		for _, p := range payloads {
			dst, _ = e.Append(dst[:0], p, m, 0)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per %d records, want 0", allocs, len(payloads))
	}
}
