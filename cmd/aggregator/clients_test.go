package main

// The client-conformance suite (issue 11, item 6): real syslog clients and
// forwarders send one fixed message set to one real aggregator, over every
// transport each of them speaks, and every record is checked against what
// the client put on the wire and what rsyslog extracts from those bytes.
//
// Clients, each run the way it is really run:
//   - Python's logging.handlers.SysLogHandler with its defaults (append_nul
//     on), in a python3 process (testdata/clients/pysyslog.py);
//   - Go's log/syslog, in this process (the standard library is an outside
//     client as much as any other);
//   - util-linux logger, one process per message (and once reading stdin);
//   - rsyslogd as a forwarder: omfwd and omuxsock actions pointing at the
//     aggregator, fed through private imuxsock sockets;
//   - syslog-ng as a forwarder: network(), syslog(), unix-stream() and
//     unix-dgram() destinations pointing at the aggregator, fed through
//     private unix-dgram() sources;
//   - github.com/RackSec/srslog, in this process: each of its formatters
//     (its default, with a space after the PRI; UnixFormatter;
//     RFC3164Formatter; RFC5424Formatter) with each of its framers (none
//     but the newline it ends every message with; RFC 5425 octet counting)
//     on every transport;
//   - Docker's syslog log driver, which is srslog configured by moby
//     (daemon/logger/syslog/syslog.go): its default format (UnixFormatter,
//     the tag "dockerd/<container id>"), rfc3164 (a container name as
//     tag), and rfc5424 and rfc5424micro, moby's own formatters, copied
//     below since moby cannot be imported.
//
// The unix datagram socket is there twice: at its default, where an RFC
// 3164 header has no HOSTNAME (as /dev/log is read), and with
// ?parse_hostname=on, where relays that write one (rsyslog's omuxsock,
// syslog-ng's unix-dgram(), srslog's RFC3164Formatter) are read right.
//
// Each (client, transport) case has its own tag (its id), which is also in
// every line of its message texts, so every record, including the lines of
// a split multi-line message that carry no header, is attributed to its case.
//
// What is expected (the aggregator's rules, modelled on rsyslog):
//   - a datagram is one record; one trailing NUL and one trailing newline
//     are not part of it;
//   - on streams a frame ends at a newline or a NUL, or is octet-counted
//     (RFC 6587); once a connection ended a frame with a NUL before any
//     newline, only NUL ends its frames (Python's append_nul), so a
//     multi-line message of a NUL-framing client is one record. A
//     newline-framed multi-line message is one record per line, which is what
//     rsyslog makes of those bytes too; the lines after the first have no
//     header and are plain-text records (rsyslog would, in addition, take
//     their first word for a hostname and their second for a tag);
//   - the fields are rsyslog's: message is rsyslog's msg property, without
//     the leading space it keeps after an RFC 3164 "tag:" (an RFC 5424 MSG
//     is kept as sent, so rsyslog's RSYSLOG_SyslogProtocol23Format, which
//     sends "- -  msg", gives " msg", as rsyslog itself reads it), appname
//     its programname, procid the pid in "tag[pid]:", no timestamp member
//     when the client sent none, and a hostname when the client put one in
//     the header, except in RFC 3164 on the unix datagram listener (as
//     imudp, imtcp and imptcp parse one and imuxsock does not: there the
//     hostname a forwarder puts before the tag is taken for the tag, as
//     imuxsock takes it). An RFC 5424 HOSTNAME is a field and always kept;
//   - control bytes are kept (JSON-escaped) and flagged control_chars, NUL
//     nul_bytes; TAB, LF and CR are ordinary text, and DEL (0x7f), which JSON
//     does not escape, raises no flag.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/syslog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/RackSec/srslog"

	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/testenv"
)

// The columns of the matrix: the aggregator's five listeners, TCP split by
// the framing the client uses.
const (
	colUnix         = "unix"
	colUnixgram     = "unixgram"
	colUnixgramHost = "unixgram parse_hostname=on"
	colTCP          = "tcp"
	colTCPOctet     = "tcp octet-counted"
	colUDP          = "udp"
)

var clientColumns = []string{colUnix, colUnixgram, colUnixgramHost, colTCP, colTCPOctet, colUDP}

// transportOf is the agg.transport (and listener scheme) of a column.
func transportOf(col string) string {
	switch col {
	case colTCPOctet:
		return "tcp"
	case colUnixgramHost:
		return "unixgram"
	}
	return col
}

// listenerOf names the listener of a column (the keys of clientSuite.listen).
func listenerOf(col string) string {
	if col == colUnixgramHost {
		return col
	}
	return transportOf(col)
}

func onNetwork(col string) bool { t := transportOf(col); return t == "tcp" || t == "udp" }

// parsesHostname says whether the listener of a column reads a HOSTNAME in
// RFC 3164 headers: every one but unixgram at its default (the /dev/log
// convention, as rsyslog's imuxsock; imptcp reads one on a unix stream
// socket too).
func parsesHostname(col string) bool { return col != colUnixgram }

// clientMsg is one message of the set, for one case.
type clientMsg struct {
	kind   string // plain, unicode, …: names the message in failures and the matrix
	marker string // kind marker plus the case id, in every line of the text ("" for the empty message)
	text   string
}

// bigMessageSize is the size of the 10 KB message. Every client here sends
// it whole: logger is run with --size 20000 (its default, 1 KiB, would cut
// it), rsyslog with maxMessageSize 64k (default 8k), syslog-ng with
// log-msg-size(65536); Python and Go have no limit, and 10 KB datagrams fit
// UDP and unix datagram sockets.
const bigMessageSize = 10 * 1024

// clientMessages is the fixed message set, with the case id in every line.
// The plain message is first: a NUL-framing client's first frame then ends
// with a NUL before any newline, which settles its connection's framing.
func clientMessages(id string) []clientMsg {
	var big strings.Builder
	big.WriteString("big-" + id + " ")
	for big.Len() < bigMessageSize {
		big.WriteString("0123456789abcdef")
	}
	m := func(kind, prefix, rest string) clientMsg {
		return clientMsg{kind: kind, marker: prefix + "-" + id, text: prefix + "-" + id + rest}
	}
	return []clientMsg{
		m("plain", "plain", " ASCII message"),
		m("unicode", "unicode", " Grüße, Καλημέρα, こんにちは 🎉"),
		m("quotes", "quotes", ` "double" 'single' back\slash \"escaped\" C:\path\n`),
		{kind: "10 KB", marker: "big-" + id, text: big.String()[:bigMessageSize]},
		m("multi-line", "multi", " line 1\nmulti-"+id+" line 2\nmulti-"+id+" line 3"),
		{kind: "empty"},
		m("control bytes", "ctrl", " \x1b[31mred\x1b[0m soh\x01 del\x7f tab\there"),
	}
}

// framing is how a client delimits messages on the wire.
type framing int

const (
	frameDatagram framing = iota // one datagram per message
	frameLF                      // a newline after each message on a stream
	frameNUL                     // a NUL after each message on a stream
	frameOctet                   // RFC 6587 octet counting
)

// stampKind is the timestamp a client puts in its header.
type stampKind int

const (
	stampNone     stampKind = iota
	stampSeconds            // whole seconds (RFC 3164 "Nov 23 06:00:12" or RFC 3339 without fraction)
	stampFraction           // RFC 3339 with a fraction of a second
)

// clientCase is one (client, transport) cell of the matrix.
type clientCase struct {
	row, col string // the matrix cell
	id       string // tag (app name) of the case; also in its message texts
	tool     string // what it needs: python3, logger, rsyslog, syslog-ng ("" for Go)

	// What the client puts on the wire.
	framing            framing
	perLine            bool   // logger reading stdin: every line is its own message with its own header
	format             string // rfc3164 or rfc5424
	host               string // the hostname in the header, "" for none
	stamp              stampKind
	facility, severity int
	escaped            bool // rsyslog escaped control characters on reception (#ooo)
	// leadingSpace: the client's RFC 5424 MSG starts with a space
	// (rsyslog's RSYSLOG_SyslogProtocol23Format writes its msg property,
	// which keeps the space after "tag:", after the structured data).
	// RFC 5424 makes it part of the message; rsyslog as a receiver keeps it
	// too (internal/record's differential test), and so do we.
	leadingSpace bool
	noEmpty      bool // the client sends nothing at all for an empty message
	sd           func(sd map[string]any) error
	// hostAlways: the hostname is read on every listener (srslog's default
	// format, a space after the PRI and RFC 3339).
	hostAlways bool
	// srslog and Docker: what is sent, and the fields that differ from a
	// plain "id[pid]:" TAG.
	formatter srslog.Formatter
	framer    srslog.Framer
	sendTag   string // the tag given to srslog ("" = id)
	appname   string // the app name a record has ("" = id)
	msgid     string // the RFC 5424 MSGID a record has
	tagMore   bool   // the TAG says more than app and pid: syslog.tag is sendTag[pid]:

	// Filled while sending.
	msgs     []clientMsg
	procIDs  []string // per message: the PROCID the client sent ("" none)
	peerPIDs []int    // per message: the process that wrote to a unix socket (0: not known)
	sendErr  error
	skip     string // why the client is unavailable
}

func (c *clientCase) name() string { return c.row + " over " + c.col }

// setPIDs records the same procid and sender for every message.
func (c *clientCase) setPIDs(procID string, peer int) {
	c.procIDs = make([]string, len(c.msgs))
	c.peerPIDs = make([]int, len(c.msgs))
	for i := range c.msgs {
		c.procIDs[i], c.peerPIDs[i] = procID, peer
	}
}

// clientWant is one record the aggregator should write for a case.
type clientWant struct {
	msg       clientMsg
	label     string // kind, plus the line for a split message
	message   string
	raw       bool // a line of a split message after the first: plain text without a header
	appname   string
	procid    string
	hostname  string
	msgid     string
	tag       string
	peerPID   int
	matchedBy int // records with exactly this message
}

// rsyslogEscape is what rsyslog's parser.escapeControlCharactersOnReceive
// (on by default) does to a message on reception: every byte below 0x20
// becomes #ooo (octal), TAB and LF included. DEL and bytes >= 0x80 stay.
func rsyslogEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 {
			fmt.Fprintf(&b, "#%03o", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// wants are the records the aggregator should write for the case.
func (c *clientCase) wants() []*clientWant {
	var out []*clientWant
	for i, m := range c.msgs {
		if m.text == "" && c.noEmpty {
			continue // nothing was sent
		}
		body := m.text
		if c.escaped {
			body = rsyslogEscape(body)
		}
		lines := []string{body}
		if (c.framing == frameLF || c.perLine) && strings.Contains(body, "\n") {
			lines = strings.Split(body, "\n")
		}
		appname := c.id
		if c.appname != "" {
			appname = c.appname
		}
		for j, line := range lines {
			w := &clientWant{msg: m, label: m.kind, message: line, appname: appname, procid: c.procIDs[i], peerPID: c.peerPIDs[i], msgid: c.msgid}
			if c.tagMore {
				w.tag = c.tagText() + "[" + w.procid + "]:"
			}
			if len(lines) > 1 {
				w.label = fmt.Sprintf("%s (line %d of %d)", m.kind, j+1, len(lines))
			}
			if j > 0 && !c.perLine {
				w.raw, w.appname, w.procid, w.msgid, w.tag = true, "", "", "", ""
				out = append(out, w)
				continue
			}
			if c.leadingSpace {
				w.message = " " + line
			}
			switch {
			case c.host != "" && (parsesHostname(c.col) || c.format == "rfc5424" || c.hostAlways):
				w.hostname = c.host // RFC 5424's HOSTNAME is a field of its own
			case c.host != "" && c.format == "rfc3164":
				// The unix datagram listener at its default does not parse
				// a hostname (as imuxsock does not): the hostname is the
				// first word after the timestamp, so it is taken for the
				// tag, and the real tag is the start of the message.
				tag := c.tagText()
				if w.procid != "" {
					tag += "[" + w.procid + "]"
				}
				w.message = tag + ": " + line
				w.appname, w.procid, w.tag = c.host, "", ""
			}
			out = append(out, w)
		}
	}
	return out
}

// tagText is the tag a case's client is given.
func (c *clientCase) tagText() string {
	if c.sendTag != "" {
		return c.sendTag
	}
	return c.id
}

// clientSuite is one aggregator with the five listeners, and everything the
// clients need to reach it.
type clientSuite struct {
	t         *testing.T
	dir       string
	agg       *aggProc
	listen    map[string]string // transport -> URL as given to --listen (the metrics label)
	bound     map[string]string // transport -> bound URL (agg.listener)
	stream    string            // unix stream socket path
	dgram     string            // unix datagram socket path
	dgramHost string            // unix datagram socket path of the listener with parse_hostname=on
	tcp, udp  string            // host:port
	hostFull  string            // os.Hostname()
	hostShort string            // up to the first dot
	start     time.Time
	end       time.Time
	rsyslog   *daemonProc
	syslogNG  *daemonProc
}

func TestClients(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := testenv.ShortTempDir(t)
	s := &clientSuite{t: t, dir: dir,
		stream: filepath.Join(dir, "s.sock"), dgram: filepath.Join(dir, "d.sock"), dgramHost: filepath.Join(dir, "h.sock")}
	s.listen = map[string]string{
		"unix": "unix://" + s.stream, "unixgram": "unixgram://" + s.dgram,
		colUnixgramHost: "unixgram://" + s.dgramHost + "?parse_hostname=on",
		"tcp":           "tcp://127.0.0.1:0", "udp": "udp://127.0.0.1:0",
	}
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	s.hostFull = h
	s.hostShort, _, _ = strings.Cut(h, ".")

	cases := s.cases()
	checkCaseIDs(t, cases)

	s.start = time.Now()
	suiteStart := s.start
	s.agg = startAgg(t, dir, "--listen", s.listen["unix"], "--listen", s.listen["unixgram"],
		"--listen", s.listen[colUnixgramHost], "--listen", s.listen["tcp"], "--listen", s.listen["udp"])
	s.bound = map[string]string{}
	for l, u := range s.listen {
		if strings.HasPrefix(u, "unixgram:") {
			s.bound[l] = u // the path, and the parameter when it is on: unixgram's own canonical URL
			continue
		}
		s.bound[l] = s.agg.url(l)
	}
	if got := s.agg.proc.Listen(); !slices.Contains(got, s.bound[colUnixgramHost]) || !slices.Contains(got, s.bound["unixgram"]) {
		t.Fatalf("the aggregator listens on %v, want %s and %s among them", got, s.bound["unixgram"], s.bound[colUnixgramHost])
	}
	s.tcp = strings.TrimPrefix(s.bound["tcp"], "tcp://")
	s.udp = strings.TrimPrefix(s.bound["udp"], "udp://")

	// The forwarders start first (they must be up before they are fed),
	// then every client group sends at once.
	var daemons []*daemonProc
	groups := map[string][]*clientCase{}
	for _, c := range cases {
		c.msgs = clientMessages(c.id)
		groups[c.tool] = append(groups[c.tool], c)
	}
	fwd := map[string]func([]*clientCase) (*daemonProc, error){"rsyslog": s.startRsyslog, "syslog-ng": s.startSyslogNG}
	for tool, start := range fwd {
		if groups[tool] == nil || groups[tool][0].skip != "" {
			continue
		}
		d, err := start(groups[tool])
		if err != nil {
			for _, c := range groups[tool] {
				c.sendErr = err
			}
			continue
		}
		daemons = append(daemons, d)
	}
	var wg sync.WaitGroup
	for tool, cs := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range cs {
				if c.skip != "" || c.sendErr != nil {
					continue
				}
				c.sendErr = s.send(tool, c)
			}
		}()
	}
	wg.Wait()
	sent := time.Now()

	// Wait until each listener has written what its cases should produce
	// (or the deadline passes: missing records are reported per case).
	want := map[string]int{}
	for _, c := range cases {
		if c.skip == "" && c.sendErr == nil {
			want[listenerOf(c.col)] += len(c.wants())
		}
	}
	if short, ok := testenv.Until(15*time.Second, func() (string, bool) {
		short := ""
		for tr, n := range want {
			if got := s.agg.metric("logagg_records_out_total", `listener="`+s.bound[tr]+`"`); got < float64(n) {
				short += fmt.Sprintf(" %s %v/%d", tr, got, n)
			}
		}
		return short, short == ""
	}); !ok {
		t.Logf("records written per listener after 15 s:%s (reported per case below)", short)
	}
	for _, d := range daemons {
		if err := d.stop(); err != nil {
			t.Error(err)
		}
	}
	s.agg.stop(syscall.SIGTERM)
	s.end = time.Now()
	recs := readRecords(t, s.agg.output)

	// Attribute every record to its case.
	byCase := map[*clientCase][]map[string]any{}
	var stray []map[string]any
	for _, r := range recs {
		if c := attribute(cases, r); c != nil {
			byCase[c] = append(byCase[c], r)
		} else {
			stray = append(stray, r)
		}
	}

	status := map[*clientCase]string{}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			if c.skip != "" {
				status[c] = "skip"
				testenv.SkipOrFail(t, c.name()+": "+c.skip)
			}
			if c.sendErr != nil {
				status[c] = "FAIL (client error)"
				t.Fatalf("%s: %v", c.name(), c.sendErr)
			}
			failed := s.checkCase(t, c, byCase[c])
			status[c] = "pass"
			if len(failed) > 0 {
				status[c] = "FAIL: " + strings.Join(failed, ", ")
			}
		})
	}
	for _, r := range stray {
		j, _ := json.Marshal(r)
		t.Errorf("a record that belongs to no case: %s", clip(string(j), 300))
	}

	matrix := clientMatrix(cases, status)
	t.Logf("client conformance (clients done %v after the start, whole suite %v):\n%s", sent.Sub(s.start).Round(time.Millisecond),
		time.Since(suiteStart).Round(time.Millisecond), matrix)
	if path := os.Getenv("LOGAGG_CLIENT_MATRIX"); path != "" {
		if err := os.WriteFile(path, []byte(matrix), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// checkCaseIDs makes sure attribution by id is unambiguous: no id is part
// of another.
func checkCaseIDs(t *testing.T, cases []*clientCase) {
	for i, a := range cases {
		for j, b := range cases {
			if i != j && strings.Contains(b.id, a.id) {
				t.Fatalf("case id %q is part of %q: records could not be attributed", a.id, b.id)
			}
		}
	}
}

// attribute finds the case a record belongs to: its app name, its MSGID or
// TAG (srslog's RFC 5424 and Docker's tags), or the case id in its message
// (lines without a header; a hostname taken for the tag).
func attribute(cases []*clientCase, r map[string]any) *clientCase {
	sl, _ := r["syslog"].(map[string]any)
	app, _ := sl["appname"].(string)
	msgid, _ := sl["msgid"].(string)
	tag, _ := sl["tag"].(string)
	msg, _ := r["message"].(string)
	for _, c := range cases {
		if app == c.id {
			return c
		}
	}
	for _, c := range cases {
		if msgid == c.id || strings.Contains(tag, c.id) {
			return c
		}
	}
	for _, c := range cases {
		if strings.Contains(msg, c.id) {
			return c
		}
	}
	return nil
}

// checkCase checks a case's records against its wants, and returns the
// kinds of message that failed.
func (s *clientSuite) checkCase(t *testing.T, c *clientCase, recs []map[string]any) []string {
	t.Helper()
	failed := map[string]bool{}
	fail := func(w *clientWant, format string, args ...any) {
		t.Helper()
		failed[w.msg.kind] = true
		t.Errorf("%s, %s message: %s", c.name(), w.label, fmt.Sprintf(format, args...))
	}
	wants := c.wants()
	used := make([]bool, len(recs))
	for _, w := range wants {
		var match []map[string]any
		for i, r := range recs {
			if m, ok := r["message"].(string); ok && m == w.message && !used[i] {
				match = append(match, r)
				used[i] = true
			}
		}
		switch {
		case len(match) == 0:
			continue // reported below, with what came instead
		case len(match) > 1:
			fail(w, "arrived %d times, want exactly once", len(match))
		}
		w.matchedBy = len(match)
		for _, p := range s.checkRecord(c, w, match[0]) {
			fail(w, "%s", p)
		}
	}
	// Missing records, with whatever arrived for the same message instead.
	var extra []map[string]any
	for i, r := range recs {
		if !used[i] {
			extra = append(extra, r)
		}
	}
	kindOf := func(r map[string]any) string {
		m, _ := r["message"].(string)
		for _, cm := range c.msgs {
			if cm.marker != "" && strings.Contains(m, cm.marker) {
				return cm.kind
			}
		}
		return "empty"
	}
	shown := map[string]bool{} // kinds whose extra records were shown with a missing one
	for _, w := range wants {
		if w.matchedBy > 0 {
			continue
		}
		var instead []string
		for _, r := range extra {
			if kindOf(r) == w.msg.kind {
				instead = append(instead, fmt.Sprintf("%q", clip(fmt.Sprint(r["message"]), 160)))
			}
		}
		if len(instead) > 0 && !shown[w.msg.kind] {
			fail(w, "missing: no record with message %q; records of this message that arrived instead: %s",
				clip(w.message, 160), strings.Join(instead, ", "))
			shown[w.msg.kind] = true
		} else {
			fail(w, "missing: no record with message %q", clip(w.message, 160))
		}
	}
	for _, r := range extra {
		k := kindOf(r)
		if shown[k] {
			continue
		}
		failed[k] = true
		j, _ := json.Marshal(r)
		t.Errorf("%s, %s message: unexpected record %s", c.name(), k, clip(string(j), 300))
	}
	var kinds []string
	for _, m := range c.msgs {
		if failed[m.kind] {
			kinds = append(kinds, m.kind)
		}
	}
	return kinds
}

var severityKeywords = [8]string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

// checkRecord returns what is wrong with the record matched to w.
func (s *clientSuite) checkRecord(c *clientCase, w *clientWant, r map[string]any) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	a := agg(r)
	tr := transportOf(c.col)
	if a["transport"] != tr {
		bad("agg.transport %v, want %s", a["transport"], tr)
	}
	if l := s.bound[listenerOf(c.col)]; a["listener"] != l {
		bad("agg.listener %v, want %s", a["listener"], l)
	}
	peer, _ := a["peer"].(map[string]any)
	if onNetwork(c.col) {
		if !strings.HasPrefix(fmt.Sprint(peer["addr"]), "127.0.0.1:") {
			bad("agg.peer %v has no loopback address", a["peer"])
		}
	} else {
		pid, _ := peer["pid"].(float64)
		switch {
		case peer["via"] != "kernel" || pid == 0:
			bad("agg.peer %v: no credentials from the kernel", a["peer"])
		case w.peerPID != 0 && int(pid) != w.peerPID:
			bad("agg.peer.pid %v, want %d (the sending process)", pid, w.peerPID)
		}
	}
	if got, want := strings.Join(recordFlags(r), ","), strings.Join(expectedFlags(w.message), ","); got != want {
		bad("agg.flags [%s], want [%s]", got, want)
	}
	allowed := map[string]bool{"message": true, "agg": true}
	if w.raw {
		// The lines after the first of a newline-framed message: rsyslog
		// too makes each a record of its own; ours is plain text.
		if a["format"] != "raw" {
			bad("agg.format %v, want raw (a line without a header)", a["format"])
		}
	} else {
		for _, k := range []string{"level", "source", "syslog", "timestamp"} {
			allowed[k] = true
		}
		if a["format"] != c.format {
			bad("agg.format %v, want %s", a["format"], c.format)
		}
		if r["level"] != severityKeywords[c.severity] {
			bad("level %v, want %s", r["level"], severityKeywords[c.severity])
		}
		if r["source"] != w.appname {
			bad("source %v, want %s", r["source"], w.appname)
		}
		sl, ok := r["syslog"].(map[string]any)
		if !ok {
			bad("no syslog member")
		}
		if f, _ := sl["facility"].(float64); int(f) != c.facility || sl["facility"] == nil {
			bad("syslog.facility %v, want %d", sl["facility"], c.facility)
		}
		if v, _ := sl["severity"].(float64); int(v) != c.severity || sl["severity"] == nil {
			bad("syslog.severity %v, want %d", sl["severity"], c.severity)
		}
		for _, f := range []struct{ key, want string }{{"appname", w.appname}, {"procid", w.procid}, {"hostname", w.hostname},
			{"msgid", w.msgid}, {"tag", w.tag}} {
			got, present := sl[f.key]
			switch {
			case f.want == "" && present && f.key == "hostname" && c.host != "":
				bad("syslog.hostname %q, want none (the unixgram listener does not parse hostnames)", got)
			case f.want == "" && present:
				bad("syslog.%s %q, want none (the client sent none)", f.key, got)
			case f.want != "" && got != f.want:
				bad("syslog.%s %v, want %q", f.key, got, f.want)
			}
		}
		sd, present := sl["sd"]
		switch {
		case c.sd == nil && present:
			bad("syslog.sd %v, want none", sd)
		case c.sd != nil:
			m, _ := sd.(map[string]any)
			if err := c.sd(m); err != nil {
				bad("syslog.sd %v: %v", sd, err)
			}
		}
		ts, present := r["timestamp"]
		switch {
		case c.stamp == stampNone && present:
			bad("timestamp %v, want none (the client sent none)", ts)
		case c.stamp != stampNone:
			if err := s.checkStamp(ts, c.stamp); err != nil {
				bad("timestamp %v: %v", ts, err)
			}
		}
	}
	var keys []string
	for k := range r {
		if !allowed[k] {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		sort.Strings(keys)
		bad("unexpected members %v", keys)
	}
	return p
}

// checkStamp checks a timestamp against the time the suite ran. A stamp
// sent with a fraction of a second must keep it: it was taken after the
// suite started, so it cannot lie before the start unless the fraction was
// lost.
func (s *clientSuite) checkStamp(v any, k stampKind) error {
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("missing (the client sent one)")
	}
	ts, err := time.Parse(time.RFC3339Nano, str)
	if err != nil {
		return err
	}
	lo := s.start.Truncate(time.Second)
	if k == stampFraction {
		lo = s.start.Truncate(time.Microsecond)
	}
	if ts.Before(lo) || ts.After(s.end.Add(time.Second)) {
		return fmt.Errorf("not within the run, %s .. %s", lo.Format(time.RFC3339Nano), s.end.Format(time.RFC3339Nano))
	}
	return nil
}

func recordFlags(r map[string]any) []string {
	var out []string
	fl, _ := agg(r)["flags"].([]any)
	for _, f := range fl {
		out = append(out, fmt.Sprint(f))
	}
	sort.Strings(out)
	return out
}

// expectedFlags: control_chars for a control byte other than NUL, TAB, LF
// and CR, nul_bytes for NUL; nothing else for these well-formed messages.
func expectedFlags(msg string) []string {
	var out []string
	if strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 && r != 0 && r != '\t' && r != '\n' && r != '\r' }) {
		out = append(out, "control_chars")
	}
	if strings.Contains(msg, "\x00") {
		out = append(out, "nul_bytes")
	}
	sort.Strings(out)
	return out
}

// clip shortens s for a failure message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:n], len(s))
}

// clientMatrix renders the matrix as Markdown.
func clientMatrix(cases []*clientCase, status map[*clientCase]string) string {
	var rows []string
	cells := map[string]map[string]string{}
	for _, c := range cases {
		if cells[c.row] == nil {
			cells[c.row] = map[string]string{}
			rows = append(rows, c.row)
		}
		st := status[c]
		if st == "" {
			st = "not run"
		}
		cells[c.row][c.col] = st
	}
	var b strings.Builder
	b.WriteString("| client | " + strings.Join(clientColumns, " | ") + " |\n|---|")
	b.WriteString(strings.Repeat("---|", len(clientColumns)) + "\n")
	for _, row := range rows {
		b.WriteString("| " + row + " |")
		for _, col := range clientColumns {
			st, ok := cells[row][col]
			if !ok {
				st = "—"
			}
			b.WriteString(" " + st + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// sd checkers.

// loggerTimeQuality: util-linux logger's RFC 5424 header always has
// [timeQuality tzKnown="1" isSynced="0|1" (syncAccuracy="…")].
func loggerTimeQuality(extra map[string]map[string]string) func(map[string]any) error {
	return func(sd map[string]any) error {
		tq, _ := sd["timeQuality"].(map[string]any)
		if tq == nil || tq["tzKnown"] != "1" || (tq["isSynced"] != "0" && tq["isSynced"] != "1") {
			return fmt.Errorf("want timeQuality with tzKnown=1 and isSynced=0|1")
		}
		for id, params := range extra {
			got, _ := sd[id].(map[string]any)
			if len(got) != len(params) {
				return fmt.Errorf("want %s %v", id, params)
			}
			for k, v := range params {
				if got[k] != v {
					return fmt.Errorf("want %s %v", id, params)
				}
			}
		}
		if len(sd) != 1+len(extra) {
			return fmt.Errorf("want only timeQuality and %v", extra)
		}
		return nil
	}
}

var digits = regexp.MustCompile(`^[0-9]+$`)

// syslogNGMeta: syslog-ng's syslog() destination adds [meta sequenceId="N"].
func syslogNGMeta(sd map[string]any) error {
	meta, _ := sd["meta"].(map[string]any)
	if len(sd) != 1 || len(meta) != 1 || !digits.MatchString(fmt.Sprint(meta["sequenceId"])) {
		return fmt.Errorf(`want only meta with sequenceId="N"`)
	}
	return nil
}

// Facility and severity of each client, all different so a mix-up shows.
const (
	pyFacility, pySeverity     = 19, 4 // local3.warning (logger.warning)
	goFacility, goSeverity     = 21, 3 // local5.err (Writer.Err)
	lgFacility, lgSeverity     = 17, 5 // local1.notice (-p)
	rsFacility, rsSeverity     = 20, 6 // local4.info, fed to rsyslog
	sngFacility, sngSeverity   = 22, 7 // local6.debug, fed to syslog-ng
	srFacility, srSeverity     = 18, 1 // local2.alert, srslog
	dkFacility, dkSeverity     = 3, 6  // daemon.info, Docker's syslog driver for a container's stdout
	fedPRIrsyslog, fedPRIsngng = rsFacility*8 + rsSeverity, sngFacility*8 + sngSeverity
)

// cases lists every (client, transport) case.
func (s *clientSuite) cases() []*clientCase {
	var cs []*clientCase
	add := func(c clientCase) { cs = append(cs, &c) }

	// Python: "<156>TAG[PID]: MSG\0", no timestamp or hostname; on a unix
	// path SysLogHandler falls back from SOCK_DGRAM to SOCK_STREAM.
	py := func(col, id string, f framing) {
		add(clientCase{row: "Python SysLogHandler", col: col, id: id, tool: "python3", framing: f, format: "rfc3164",
			facility: pyFacility, severity: pySeverity})
	}
	py(colUnix, "py-ustr", frameNUL)
	py(colUnixgram, "py-ugrm", frameDatagram)
	py(colTCP, "py-tcp", frameNUL)
	py(colUDP, "py-udp", frameDatagram)

	// Go log/syslog: on "unix"/"unixgram" the local form "<171>Stamp
	// TAG[PID]: MSG\n" (no hostname), on tcp/udp "<171>RFC3339 HOST
	// TAG[PID]: MSG\n"; newline-terminated on every transport.
	gos := func(col, id string, f framing, host string) {
		add(clientCase{row: "Go log/syslog", col: col, id: id, tool: "", framing: f, format: "rfc3164", host: host,
			stamp: stampSeconds, facility: goFacility, severity: goSeverity})
	}
	gos(colUnix, "go-ustr", frameLF, "")
	gos(colUnixgram, "go-ugrm", frameDatagram, "")
	gos(colTCP, "go-tcp", frameLF, s.hostFull)
	gos(colUDP, "go-udp", frameDatagram, s.hostFull)

	// util-linux logger, -i (pid) --size 20000 (whole 10 KB). Its default
	// format is the local one ("<141>Stamp TAG[PID]: MSG", no hostname) on
	// -u and RFC 5424 (with hostname and timeQuality) on -n. An empty
	// argument sends nothing.
	lg := func(row, col, id string, f framing, format string, host string, stamp stampKind, sd func(map[string]any) error) {
		add(clientCase{row: row, col: col, id: id, tool: "logger", framing: f, format: format, host: host, stamp: stamp,
			facility: lgFacility, severity: lgSeverity, noEmpty: true, sd: sd})
	}
	tq := loggerTimeQuality(nil)
	const lgDefault, lg3164, lg5424, lgSD = "logger", "logger --rfc3164", "logger --rfc5424", "logger --rfc5424 --sd-id"
	lg(lgDefault, colUnix, "lg-ustr", frameLF, "rfc3164", "", stampSeconds, nil)
	lg(lgDefault, colUnixgram, "lg-ugrm", frameDatagram, "rfc3164", "", stampSeconds, nil)
	lg(lgDefault, colTCP, "lg-tcplf", frameLF, "rfc5424", s.hostFull, stampFraction, tq)
	lg(lgDefault, colTCPOctet, "lg-tcpoc", frameOctet, "rfc5424", s.hostFull, stampFraction, tq)
	lg(lgDefault, colUDP, "lg-udp", frameDatagram, "rfc5424", s.hostFull, stampFraction, tq)
	lg(lg3164, colTCP, "l3-tcplf", frameLF, "rfc3164", s.hostShort, stampSeconds, nil)
	lg(lg3164, colTCPOctet, "l3-tcpoc", frameOctet, "rfc3164", s.hostShort, stampSeconds, nil)
	lg(lg3164, colUDP, "l3-udp", frameDatagram, "rfc3164", s.hostShort, stampSeconds, nil)
	lg(lg5424, colUnix, "l5-ustr", frameLF, "rfc5424", s.hostFull, stampFraction, tq)
	lg(lg5424, colUnixgram, "l5-ugrm", frameDatagram, "rfc5424", s.hostFull, stampFraction, tq)
	lg(lgSD, colUnixgram, "lsd-ugrm", frameDatagram, "rfc5424", s.hostFull, stampFraction,
		loggerTimeQuality(map[string]map[string]string{"zoo@32473": {"tiger": "hungry"}}))
	lg(lgSD, colUDP, "lsd-udp", frameDatagram, "rfc5424", s.hostFull, stampFraction,
		loggerTimeQuality(map[string]map[string]string{"zoo@32473": {"tiger": "hungry"}}))
	// logger reading its stdin: one message per line, each with its own
	// header, so a multi-line message is three messages and an empty line
	// is an empty message.
	for _, c := range []clientCase{
		{col: colUnix, id: "lin-ustr", framing: frameLF, format: "rfc3164", stamp: stampSeconds},
		{col: colTCP, id: "lin-tcplf", framing: frameLF, format: "rfc5424", host: s.hostFull, stamp: stampFraction, sd: tq},
	} {
		c.row, c.tool, c.perLine, c.facility, c.severity = "logger (stdin)", "logger", true, lgFacility, lgSeverity
		add(c)
	}

	// rsyslog fed "<166>Stamp TAG[PID]: MSG" on imuxsock, forwarding with
	// omfwd. imuxsock ignores the fed timestamp (IgnoreTimestamp, on by
	// default) and stamps the reception time; control characters are
	// escaped on reception (parser.escapeControlCharactersOnReceive, on by
	// default), so a multi-line message leaves rsyslog as one line with
	// #012. Templates:
	//   RSYSLOG_TraditionalForwardFormat "<166>Stamp HOST TAG[PID]: MSG"
	//   RSYSLOG_ForwardFormat            "<166>RFC3339.micro HOST TAG[PID]: MSG"
	//   RSYSLOG_SyslogProtocol23Format   "<166>1 RFC3339.micro HOST TAG PID - -  MSG\n"
	// The 5424 template's MSG is rsyslog's msg with its leading space (hence
	// two spaces after the structured data) and ends with a newline, inside
	// the octet-counted frame or datagram. The newline is framing; the
	// space is part of RFC 5424's MSG, and rsyslog as a receiver keeps it
	// as well (leadingSpace).
	rs := func(row, col, id string, f framing, format string, stamp stampKind) {
		add(clientCase{row: row, col: col, id: id, tool: "rsyslog", framing: f, format: format, host: s.hostShort,
			stamp: stamp, facility: rsFacility, severity: rsSeverity, escaped: true, leadingSpace: format == "rfc5424"})
	}
	for _, tpl := range []struct {
		row, short, format string
		stamp              stampKind
	}{
		{"rsyslog omfwd RSYSLOG_TraditionalForwardFormat", "rt", "rfc3164", stampSeconds},
		{"rsyslog omfwd RSYSLOG_ForwardFormat", "rf", "rfc3164", stampFraction},
		{"rsyslog omfwd RSYSLOG_SyslogProtocol23Format", "r5", "rfc5424", stampFraction},
	} {
		rs(tpl.row, colTCP, tpl.short+"-tcplf", frameLF, tpl.format, tpl.stamp)
		rs(tpl.row, colTCPOctet, tpl.short+"-tcpoc", frameOctet, tpl.format, tpl.stamp)
		rs(tpl.row, colUDP, tpl.short+"-udp", frameDatagram, tpl.format, tpl.stamp)
	}
	// omuxsock's default template is RSYSLOG_TraditionalForwardFormat: a
	// hostname on a unix datagram socket.
	rs("rsyslog omuxsock", colUnixgram, "rux-ugrm", frameDatagram, "rfc3164", stampSeconds)
	rs("rsyslog omuxsock", colUnixgramHost, "rux-ughn", frameDatagram, "rfc3164", stampSeconds)

	// syslog-ng fed "<183>Stamp TAG[PID]: MSG" on unix-dgram() sources. It
	// keeps the fed timestamp and passes control characters and newlines
	// through unchanged. network(), unix-stream() and unix-dgram() send
	// "<183>Stamp HOST TAG[PID]: MSG\n"; syslog() sends "<183>1 RFC3339
	// HOST TAG PID - [meta sequenceId="N"] MSG\n", octet-counted on TCP.
	sng := func(row, col, id string, f framing, format string, sd func(map[string]any) error) {
		add(clientCase{row: row, col: col, id: id, tool: "syslog-ng", framing: f, format: format, host: s.hostShort,
			stamp: stampSeconds, facility: sngFacility, severity: sngSeverity, sd: sd})
	}
	sng("syslog-ng network()", colTCP, "sn-tcplf", frameLF, "rfc3164", nil)
	sng("syslog-ng network()", colUDP, "sn-udp", frameDatagram, "rfc3164", nil)
	sng("syslog-ng syslog()", colTCPOctet, "ss-tcpoc", frameOctet, "rfc5424", syslogNGMeta)
	sng("syslog-ng syslog()", colUDP, "ss-udp", frameDatagram, "rfc5424", syslogNGMeta)
	sng("syslog-ng unix-stream() / unix-dgram()", colUnix, "su-ustr", frameLF, "rfc3164", nil)
	sng("syslog-ng unix-stream() / unix-dgram()", colUnixgram, "su-ugrm", frameDatagram, "rfc3164", nil)
	sng("syslog-ng unix-stream() / unix-dgram()", colUnixgramHost, "su-ughn", frameDatagram, "rfc3164", nil)

	s.srslogCases(add)

	// Tools that are missing.
	avail := map[string]string{}
	if _, err := exec.LookPath("python3"); err != nil {
		avail["python3"] = "python3 not installed"
	}
	if _, err := exec.LookPath("logger"); err != nil {
		avail["logger"] = "logger (util-linux) not installed (scripts/setup.sh installs it)"
	}
	if rsyslogd() == "" {
		avail["rsyslog"] = "rsyslogd not installed (scripts/setup.sh installs it)"
	}
	if _, err := os.Stat(syslogNGBin()); err != nil {
		avail["syslog-ng"] = "syslog-ng not unpacked at " + syslogNGBin() + " (scripts/setup.sh does it)"
	}
	for _, c := range cs {
		c.skip = avail[c.tool]
	}
	return cs
}

func rsyslogd() string {
	if p, err := exec.LookPath("rsyslogd"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/rsyslogd"); err == nil {
		return "/usr/sbin/rsyslogd"
	}
	return ""
}

func syslogNGBin() string { return filepath.Join(peers.SyslogNGPrefix(), "usr/sbin/syslog-ng") }

// send runs the client of a case with its whole message set.
func (s *clientSuite) send(tool string, c *clientCase) error {
	switch tool {
	case "python3":
		return s.sendPython(c)
	case "":
		return s.sendGo(c)
	case "logger":
		return s.sendLogger(c)
	case "rsyslog", "syslog-ng":
		return s.feed(c)
	case "srslog":
		return s.sendSrslog(c)
	}
	return fmt.Errorf("no sender for %q", tool)
}

// address is where a client of the column sends: a path or host:port.
func (s *clientSuite) address(col string) string {
	switch transportOf(col) {
	case "unix":
		return s.stream
	case "unixgram":
		if col == colUnixgramHost {
			return s.dgramHost
		}
		return s.dgram
	case "tcp":
		return s.tcp
	}
	return s.udp
}

func (c *clientCase) texts() []string {
	out := make([]string, len(c.msgs))
	for i, m := range c.msgs {
		out[i] = m.text
	}
	return out
}

func (s *clientSuite) sendPython(c *clientCase) error {
	in, _ := json.Marshal(c.texts())
	cmd := exec.Command("python3", filepath.Join("testdata", "clients", "pysyslog.py"), transportOf(c.col), s.address(c.col), c.id)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("pysyslog.py: %w\n%s", err, stderr.String())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("pysyslog.py printed %q, want its pid", out)
	}
	c.setPIDs(strconv.Itoa(pid), pid)
	return nil
}

func (s *clientSuite) sendGo(c *clientCase) error {
	w, err := syslog.Dial(transportOf(c.col), s.address(c.col), syslog.LOG_LOCAL5|syslog.LOG_ERR, c.id)
	if err != nil {
		return err
	}
	for _, m := range c.texts() {
		if err := w.Err(m); err != nil {
			w.Close()
			return err
		}
	}
	c.setPIDs(strconv.Itoa(os.Getpid()), os.Getpid())
	return w.Close()
}

// loggerArgs are the mode flags of a logger case.
func (s *clientSuite) loggerArgs(c *clientCase) []string {
	host, port, _ := net.SplitHostPort(s.address(c.col))
	var args []string
	switch c.col {
	case colUnix, colUnixgram:
		args = []string{"-u", s.address(c.col)}
	case colTCP:
		args = []string{"-T", "-n", host, "-P", port}
	case colTCPOctet:
		args = []string{"-T", "-n", host, "-P", port, "--octet-count"}
	case colUDP:
		args = []string{"-d", "-n", host, "-P", port}
	}
	switch c.row {
	case "logger --rfc3164":
		args = append(args, "--rfc3164")
	case "logger --rfc5424":
		args = append(args, "--rfc5424")
	case "logger --rfc5424 --sd-id":
		args = append(args, "--rfc5424", "--sd-id", "zoo@32473", "--sd-param", `tiger="hungry"`)
	}
	return append(args, "-i", "--size", "20000", "-t", c.id, "-p", "local1.notice")
}

func (s *clientSuite) sendLogger(c *clientCase) error {
	args := s.loggerArgs(c)
	if c.perLine {
		cmd := exec.Command("logger", args...)
		cmd.Stdin = strings.NewReader(strings.Join(c.texts(), "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("logger %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		c.setPIDs(strconv.Itoa(cmd.Process.Pid), cmd.Process.Pid)
		return nil
	}
	c.setPIDs("", 0)
	for i, m := range c.texts() {
		cmd := exec.Command("logger", append(args, "--", m)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("logger %s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
		c.procIDs[i], c.peerPIDs[i] = strconv.Itoa(cmd.Process.Pid), cmd.Process.Pid
	}
	return nil
}

// feed gives a forwarder the message set through the case's private input
// socket, as syslog(3) would write it: "<PRI>Stamp TAG[PID]: MSG".
func (s *clientSuite) feed(c *clientCase) error {
	pri, d := fedPRIrsyslog, s.rsyslog
	if c.tool == "syslog-ng" {
		pri, d = fedPRIsngng, s.syslogNG
	}
	conn, err := net.Dial("unixgram", s.inputSocket(c))
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, m := range c.texts() {
		if _, err := fmt.Fprintf(conn, "<%d>%s %s[%d]: %s", pri, time.Now().Format(time.Stamp), c.id, os.Getpid(), m); err != nil {
			return err
		}
	}
	c.setPIDs(strconv.Itoa(os.Getpid()), 0)
	if !onNetwork(c.col) {
		for i := range c.peerPIDs {
			c.peerPIDs[i] = d.cmd.Process.Pid
		}
	}
	return nil
}

func (s *clientSuite) inputSocket(c *clientCase) string {
	return filepath.Join(s.dir, c.tool, c.id+".sock")
}

// daemonProc is a forwarder running in the foreground with a private
// configuration, pid file and sockets (as internal/bench/peers runs them).
type daemonProc struct {
	name    string
	cmd     *exec.Cmd
	out     syncBuffer
	exited  chan struct{}
	waitErr error
}

// startDaemon starts cmd and waits until every socket in sockets exists.
func (s *clientSuite) startDaemon(name string, cmd *exec.Cmd, sockets []string) (*daemonProc, error) {
	d := &daemonProc{name: name, cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &d.out, &d.out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { d.waitErr = cmd.Wait(); close(d.exited) }()
	s.t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			cmd.Process.Kill()
			<-d.exited
		}
	})
	missing, _ := testenv.Until(15*time.Second, func() (string, bool) {
		for _, sock := range sockets {
			if _, err := os.Stat(sock); err != nil {
				select {
				case <-d.exited:
					return sock, true
				default:
					return sock, false
				}
			}
		}
		return "", true
	})
	if missing != "" {
		select {
		case <-d.exited:
			return nil, fmt.Errorf("%s exited at start-up: %w\n%s", name, d.waitErr, d.out.String())
		default:
			return nil, fmt.Errorf("%s did not create %s within 15 s\n%s", name, missing, d.out.String())
		}
	}
	return d, nil
}

// stop ends the daemon with SIGTERM; both forwarders send what they hold
// before they exit.
func (d *daemonProc) stop() error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("%s did not exit on SIGTERM\n%s", d.name, d.out.String())
	}
	return nil
}

// startRsyslog runs rsyslogd with one imuxsock input and one ruleset per
// case. maxMessageSize is raised from its 8 KiB default so the 10 KB
// message passes whole. omuxsock only has the legacy configuration syntax
// in rsyslog 8.2302 ($OMUXSockSocket before a ":omuxsock:" action).
func (s *clientSuite) startRsyslog(cases []*clientCase) (*daemonProc, error) {
	dir := filepath.Join(s.dir, "rsyslog")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	_, tcpPort, _ := net.SplitHostPort(s.tcp)
	_, udpPort, _ := net.SplitHostPort(s.udp)
	var b strings.Builder
	fmt.Fprintf(&b, "global(workDirectory=%q maxMessageSize=\"64k\")\n", dir)
	b.WriteString("module(load=\"imuxsock\" SysSock.Use=\"off\")\n")
	b.WriteString("$ModLoad omuxsock\n")
	var sockets []string
	for _, c := range cases {
		template := strings.TrimPrefix(c.row, "rsyslog omfwd ")
		switch c.col {
		case colTCP, colTCPOctet:
			framingName := map[string]string{colTCP: "traditional", colTCPOctet: "octet-counted"}[c.col]
			fmt.Fprintf(&b, "ruleset(name=%q) { action(type=\"omfwd\" target=\"127.0.0.1\" port=%q protocol=\"tcp\" TCP_Framing=%q template=%q) }\n",
				c.id, tcpPort, framingName, template)
		case colUDP:
			fmt.Fprintf(&b, "ruleset(name=%q) { action(type=\"omfwd\" target=\"127.0.0.1\" port=%q protocol=\"udp\" template=%q) }\n",
				c.id, udpPort, template)
		case colUnixgram, colUnixgramHost:
			// A legacy directive: it applies to the omuxsock actions
			// that follow it.
			fmt.Fprintf(&b, "$OMUXSockSocket %s\nruleset(name=%q) {\n:omuxsock:\n}\n", s.address(c.col), c.id)
		default:
			return nil, fmt.Errorf("rsyslog: no %s forwarding", c.col)
		}
		sock := s.inputSocket(c)
		sockets = append(sockets, sock)
		fmt.Fprintf(&b, "input(type=\"imuxsock\" Socket=%q Ruleset=%q)\n", sock, c.id)
	}
	conf := filepath.Join(dir, "rsyslog.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(rsyslogd(), "-n", "-f", conf, "-i", filepath.Join(dir, "rsyslog.pid"))
	d, err := s.startDaemon("rsyslogd", cmd, sockets)
	if err != nil {
		return nil, fmt.Errorf("%w\nconfiguration:\n%s", err, b.String())
	}
	s.rsyslog = d
	return d, nil
}

// startSyslogNG runs syslog-ng with one unix-dgram() source, destination
// and log path per case. log-msg-size is set to 64 KiB so the 10 KB message
// passes whole; each destination has its own persist-name because several
// point at the same address.
func (s *clientSuite) startSyslogNG(cases []*clientCase) (*daemonProc, error) {
	dir := filepath.Join(s.dir, "syslog-ng")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tcpHost, tcpPort, _ := net.SplitHostPort(s.tcp)
	udpHost, udpPort, _ := net.SplitHostPort(s.udp)
	var b strings.Builder
	b.WriteString("@version: 3.38\noptions { stats_freq(0); log_msg_size(65536); };\n")
	var sockets []string
	for _, c := range cases {
		name := strings.ReplaceAll(c.id, "-", "_")
		var dest string
		switch {
		case strings.HasPrefix(c.row, "syslog-ng network()") && c.col == colTCP:
			dest = fmt.Sprintf("network(%q port(%s) transport(\"tcp\")", tcpHost, tcpPort)
		case strings.HasPrefix(c.row, "syslog-ng network()") && c.col == colUDP:
			dest = fmt.Sprintf("network(%q port(%s) transport(\"udp\")", udpHost, udpPort)
		case strings.HasPrefix(c.row, "syslog-ng syslog()") && c.col == colTCPOctet:
			dest = fmt.Sprintf("syslog(%q port(%s) transport(\"tcp\")", tcpHost, tcpPort)
		case strings.HasPrefix(c.row, "syslog-ng syslog()") && c.col == colUDP:
			dest = fmt.Sprintf("syslog(%q port(%s) transport(\"udp\")", udpHost, udpPort)
		case c.col == colUnix:
			dest = fmt.Sprintf("unix-stream(%q", s.stream)
		case c.col == colUnixgram || c.col == colUnixgramHost:
			dest = fmt.Sprintf("unix-dgram(%q", s.address(c.col))
		default:
			return nil, fmt.Errorf("syslog-ng: no destination for %s", c.name())
		}
		sock := s.inputSocket(c)
		sockets = append(sockets, sock)
		fmt.Fprintf(&b, "source s_%s { unix-dgram(%q); };\n", name, sock)
		fmt.Fprintf(&b, "destination d_%s { %s persist-name(%q)); };\n", name, dest, name)
		fmt.Fprintf(&b, "log { source(s_%s); destination(d_%s); };\n", name, name)
	}
	conf := filepath.Join(dir, "syslog-ng.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	prefix := peers.SyslogNGPrefix()
	libdir := filepath.Join(prefix, "usr/lib/syslog-ng")
	cmd := exec.Command(syslogNGBin(), "-F", "-f", conf,
		"--module-path="+filepath.Join(libdir, "3.38"),
		"--persist-file="+filepath.Join(dir, "syslog-ng.persist"),
		"--pidfile="+filepath.Join(dir, "syslog-ng.pid"),
		"--control="+filepath.Join(dir, "syslog-ng.ctl"))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libdir)
	d, err := s.startDaemon("syslog-ng", cmd, sockets)
	if err != nil {
		return nil, fmt.Errorf("%w\nconfiguration:\n%s", err, b.String())
	}
	s.syslogNG = d
	return d, nil
}
