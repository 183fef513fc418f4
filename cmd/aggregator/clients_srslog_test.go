package main

// srslog (github.com/RackSec/srslog) and Docker's syslog log driver in the
// client-conformance suite (clients_test.go).
//
// What srslog sends, per formatter (every message ends with a newline,
// which it adds; the framer then applies to the whole):
//
//	DefaultFormatter  "<PRI> RFC3339 HOST TAG[PID]: MSG"  (a space after the PRI)
//	UnixFormatter     "<PRI>Stamp TAG[PID]: MSG"
//	RFC3164Formatter  "<PRI>Stamp HOST TAG[PID]: MSG"
//	RFC5424Formatter  "<PRI>1 RFC3339 HOST APP PID TAG - MSG" (APP: the last 48 bytes of os.Args[0])
//
// and per framer: DefaultFramer adds nothing (the newline frames it on a
// stream), RFC5425MessageLengthFramer prefixes "LEN " on every transport,
// also on datagrams, where the aggregator removes a count that covers
// exactly the rest. HOST is os.Hostname(). DefaultFormatter is what
// srslog.Dial uses on every network ("unixgram" and "unix" too), so its
// hostname is read on every listener; RFC3164Formatter's is read as any
// relay's is, so on the unix datagram socket at its default it is taken
// for the app (as rsyslog and syslog-ng take it) and the listener with
// parse_hostname=on is the one to send it to.
//
// Docker's driver (moby, daemon/logger/syslog/syslog.go) is srslog.Dial
// with facility daemon, severity info for stdout, and by syslog-format:
// "" UnixFormatter, rfc3164 RFC3164Formatter, both with srslog's
// DefaultFramer; rfc5424 and rfc5424micro formatters of moby's own (below)
// that put the tag in both APP-NAME and MSGID, with the DefaultFramer but
// on tcp+tls (RFC 5425 octet counting), which the suite does not run. Its
// default tag was the daemon binary's name, '/' and the container's short
// id ("dockerd/3f2a1b9c0d1e", in an earlier revision of that file) and
// became "{{.ID}}" alone later (loggerutils.DefaultTemplate); operators
// set tag to "{{.Name}}" and the like. The suite sends the first form, whose TAG
// says more than its app name "dockerd" and is kept as syslog.tag.

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/RackSec/srslog"
)

// dockerRFC5424 returns one of the two RFC 5424 formatters of Docker's
// syslog driver, which moby writes itself instead of using srslog's:
// "<PRI>1 TIMESTAMP HOST TAG PID TAG - MSG", the tag as APP-NAME and as
// MSGID. rfc5424 stamps time.RFC3339 (whole seconds), rfc5424micro
// "2006-01-02T15:04:05.999999Z07:00" (microseconds, trailing zeros
// dropped). Written here, since moby cannot be imported, after reading
// moby's daemon/logger/syslog/syslog.go (a revision with syslog-format and
// rfc5424micro, found with a code search of public repositories), not
// from memory.
func dockerRFC5424(layout string) srslog.Formatter {
	return func(p srslog.Priority, hostname, tag, content string) string {
		return fmt.Sprintf("<%d>1 %s %s %s %d %s - %s", p, time.Now().Format(layout), hostname, tag, os.Getpid(), tag, content)
	}
}

// dockerRFC5424MicroLayout is rfc5424micro's timestamp layout.
const dockerRFC5424MicroLayout = "2006-01-02T15:04:05.999999Z07:00"

// srslogAppName is RFC5424Formatter's APP-NAME: the last 48 bytes of
// os.Args[0].
func srslogAppName() string {
	a := os.Args[0]
	if len(a) > 48 {
		a = a[len(a)-48:]
	}
	return a
}

// srslogCases adds the srslog and Docker cases.
func (s *clientSuite) srslogCases(add func(clientCase)) {
	type form struct {
		row, short  string
		formatter   srslog.Formatter
		format      string
		host        string
		hostAlways  bool
		appname     string
		msgidIsID   bool
		stamp       stampKind
		unixgramArg bool // also on the listener with parse_hostname=on (a hostname the default reads as the app)
	}
	forms := []form{
		{"srslog DefaultFormatter", "d", srslog.DefaultFormatter, "rfc3164", s.hostFull, true, "", false, stampSeconds, false},
		{"srslog UnixFormatter", "u", srslog.UnixFormatter, "rfc3164", "", false, "", false, stampSeconds, false},
		{"srslog RFC3164Formatter", "3", srslog.RFC3164Formatter, "rfc3164", s.hostFull, false, "", false, stampSeconds, true},
		{"srslog RFC5424Formatter", "5", srslog.RFC5424Formatter, "rfc5424", s.hostFull, false, srslogAppName(), true, stampSeconds, false},
	}
	framers := []struct {
		row, short string
		framer     srslog.Framer
		stream     framing // on unix stream and TCP sockets
		tcpCol     string
	}{
		{"", "n", srslog.DefaultFramer, frameLF, colTCP},
		{", RFC 5425 framer", "o", srslog.RFC5425MessageLengthFramer, frameOctet, colTCPOctet},
	}
	for _, fm := range forms {
		for _, fr := range framers {
			cols := []struct {
				col, short string
				f          framing
			}{{colUnix, "ustr", fr.stream}, {colUnixgram, "ugrm", frameDatagram}, {fr.tcpCol, "tcp", fr.stream}, {colUDP, "udp", frameDatagram}}
			if fm.unixgramArg {
				cols = append(cols, struct {
					col, short string
					f          framing
				}{colUnixgramHost, "ughn", frameDatagram})
			}
			for _, col := range cols {
				id := "s" + fm.short + fr.short + "-" + col.short
				c := clientCase{row: fm.row + fr.row, col: col.col, id: id, tool: "srslog", framing: col.f, format: fm.format,
					host: fm.host, hostAlways: fm.hostAlways, stamp: fm.stamp, facility: srFacility, severity: srSeverity,
					formatter: fm.formatter, framer: fr.framer, appname: fm.appname}
				if fm.msgidIsID {
					c.msgid = id
				}
				add(c)
			}
		}
	}

	// Docker's syslog driver, as moby configures srslog. The container id
	// (or name) in the tag is the case id, so that its records are
	// attributed to it.
	dk := func(row, col, id string, f framing, formatter srslog.Formatter, format string, stamp stampKind, mod func(*clientCase)) {
		c := clientCase{row: row, col: col, id: id, tool: "srslog", framing: f, format: format, stamp: stamp,
			facility: dkFacility, severity: dkSeverity, formatter: formatter, framer: srslog.DefaultFramer}
		if mod != nil {
			mod(&c)
		}
		add(c)
	}
	const dkDefault, dk3164 = "Docker syslog driver (UnixFormatter, tag dockerd/<container id>)", "Docker syslog driver, syslog-format=rfc3164 (tag {{.Name}})"
	const dk5424, dkMicro = "Docker syslog driver, syslog-format=rfc5424", "Docker syslog driver, syslog-format=rfc5424micro"
	containerTag := func(c *clientCase) { c.sendTag, c.appname, c.tagMore = "dockerd/"+c.id, "dockerd", true }
	dk(dkDefault, colUnix, "dk-ustr", frameLF, srslog.UnixFormatter, "rfc3164", stampSeconds, containerTag)
	dk(dkDefault, colUnixgram, "dk-ugrm", frameDatagram, srslog.UnixFormatter, "rfc3164", stampSeconds, containerTag)
	dk(dkDefault, colTCP, "dk-tcp", frameLF, srslog.UnixFormatter, "rfc3164", stampSeconds, containerTag)
	dk(dkDefault, colUDP, "dk-udp", frameDatagram, srslog.UnixFormatter, "rfc3164", stampSeconds, containerTag)
	withHost := func(c *clientCase) { c.host = s.hostFull }
	dk(dk3164, colUnixgramHost, "d3-ughn", frameDatagram, srslog.RFC3164Formatter, "rfc3164", stampSeconds, withHost)
	dk(dk3164, colTCP, "d3-tcp", frameLF, srslog.RFC3164Formatter, "rfc3164", stampSeconds, withHost)
	dk(dk3164, colUDP, "d3-udp", frameDatagram, srslog.RFC3164Formatter, "rfc3164", stampSeconds, withHost)
	tagAsApp := func(c *clientCase) { c.host, c.msgid = s.hostFull, c.id }
	for _, tc := range []struct {
		row, short, layout string
		stamp              stampKind
	}{{dk5424, "d5", time.RFC3339, stampSeconds}, {dkMicro, "dm", dockerRFC5424MicroLayout, stampFraction}} {
		f := dockerRFC5424(tc.layout)
		dk(tc.row, colUnixgram, tc.short+"-ugrm", frameDatagram, f, "rfc5424", tc.stamp, tagAsApp)
		dk(tc.row, colTCP, tc.short+"-tcp", frameLF, f, "rfc5424", tc.stamp, tagAsApp)
		dk(tc.row, colUDP, tc.short+"-udp", frameDatagram, f, "rfc5424", tc.stamp, tagAsApp)
	}
}

// sendSrslog sends a case's messages with srslog.Dial and the case's
// formatter and framer, one Writer (one connection or socket) per case.
func (s *clientSuite) sendSrslog(c *clientCase) error {
	w, err := srslog.Dial(transportOf(c.col), s.address(c.col), srslog.Priority(c.facility<<3), c.tagText())
	if err != nil {
		return err
	}
	w.SetFormatter(c.formatter)
	w.SetFramer(c.framer)
	for _, m := range c.texts() {
		if _, err := w.WriteWithPriority(srslog.Priority(c.facility<<3|c.severity), []byte(m)); err != nil {
			w.Close()
			return err
		}
	}
	c.setPIDs(strconv.Itoa(os.Getpid()), os.Getpid())
	return w.Close()
}
