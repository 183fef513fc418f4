package record

import "testing"

func TestEncoderFields(t *testing.T) {
	e := NewEncoder()
	m := &Meta{ParseHostname: true, RecvNS: 1}
	m.Prepare()
	for _, tc := range []struct {
		in                            string
		pri                           int16
		app, host, procid, msgid, tag string
		msg                           string
	}{
		// The TAG is always there for the rules, as rsyslog's syslogtag,
		// also where the output leaves syslog.tag out.
		{"<38>Nov 26 21:03:52 myhost sshd[1234]: Accepted password", 38, "sshd", "myhost", "1234", "", "sshd[1234]:", "Accepted password"},
		// The same header again: the memo path must give the same fields.
		{"<38>Nov 26 21:03:52 myhost sshd[1234]: second", 38, "sshd", "myhost", "1234", "", "sshd[1234]:", "second"},
		{"<30>Nov 26 21:03:52 myhost docker/web-1[99]: third", 30, "docker", "myhost", "99", "", "docker/web-1[99]:", "third"},
		{"<30>Nov 26 21:03:52 myhost docker/web-1[99]: memo", 30, "docker", "myhost", "99", "", "docker/web-1[99]:", "memo"},
		// srslog's default format.
		{"<166> 2026-11-26T20:59:03Z vm dockerd/3f2a1b9c[16296]: msg", 166, "dockerd", "vm", "16296", "", "dockerd/3f2a1b9c[16296]:", "msg"},
		{"<165>1 2026-11-26T21:03:52Z host app 77 ID47 - hello 5424", 165, "app", "host", "77", "ID47", "", "hello 5424"},
		{"plain text line", -1, "", "", "", "", "", "plain text line"},
		{`{"message":"json","level":"err"}`, -1, "", "", "", "", "", ""},
	} {
		e.Append(nil, []byte(tc.in), m, 0)
		f := e.Fields()
		if f.PRI != tc.pri || string(f.App) != tc.app || string(f.Host) != tc.host || string(f.ProcID) != tc.procid ||
			string(f.MsgID) != tc.msgid || string(f.Tag) != tc.tag || string(f.Message) != tc.msg {
			t.Errorf("%q: fields %d app=%q host=%q procid=%q msgid=%q tag=%q msg=%q", tc.in, f.PRI, f.App, f.Host, f.ProcID, f.MsgID, f.Tag, f.Message)
		}
	}
}
