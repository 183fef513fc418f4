package record

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// These tests decode what util-linux logger(1) really sends, captured from
// a socket the test owns, so the decoders are checked against a real
// client rather than against strings we wrote ourselves.

func needLogger(t *testing.T) string {
	t.Helper()
	return testenv.RequireCommand(t, "logger") // util-linux
}

type loggerCase struct {
	name     string
	args     []string
	format   Format
	level    string
	hostname bool // an RFC 3164 header with a HOSTNAME (--rfc3164)
	check    func(t *testing.T, obj map[string]any)
}

var loggerCases = []loggerCase{
	{name: "default local format", args: nil, format: FormatRFC3164, level: "notice"},
	{name: "rfc3164", args: []string{"--rfc3164"}, format: FormatRFC3164, level: "notice", hostname: true},
	{name: "rfc5424", args: []string{"--rfc5424"}, format: FormatRFC5424, level: "notice",
		check: func(t *testing.T, obj map[string]any) {
			sd, _ := obj["syslog"].(map[string]any)["sd"].(map[string]any)
			if _, ok := sd["timeQuality"]; !ok {
				t.Errorf("timeQuality structured data missing: %v", obj["syslog"])
			}
		}},
	{name: "rfc5424 without time and host", args: []string{"--rfc5424=notq,notime,nohost"}, format: FormatRFC5424, level: "notice",
		check: func(t *testing.T, obj map[string]any) {
			if _, ok := obj["timestamp"]; ok {
				t.Errorf("timestamp present although logger sent none")
			}
		}},
	{name: "rfc5424 priority, msgid and pid", args: []string{"--rfc5424", "-p", "local3.warning", "--msgid", "M1", "-i"},
		format: FormatRFC5424, level: "warning",
		check: func(t *testing.T, obj map[string]any) {
			sl := normalize(obj["syslog"]).(map[string]any)
			if sl["facility"] != "19" || sl["severity"] != "4" || sl["msgid"] != "M1" || sl["procid"] == nil {
				t.Errorf("syslog object %v", sl)
			}
		}},
	{name: "rfc3164 priority", args: []string{"--rfc3164", "-p", "user.err"}, format: FormatRFC3164, level: "err", hostname: true},
	{name: "rfc5424 seq stamp", args: []string{"--rfc5424", "--sd-id", "seq@32473",
		"--sd-param", `id="p7-123"`, "--sd-param", `n="99"`, "--sd-param", `t="1763845678123456789"`},
		format: FormatRFC5424, level: "notice",
		check: func(t *testing.T, obj map[string]any) {
			if obj["producer_id"] != "p7-123" || normalize(obj["seq"]) != "99" || normalize(obj["sent_ns"]) != "1763845678123456789" {
				t.Errorf("seq stamp not decoded: %v %v %v", obj["producer_id"], obj["seq"], obj["sent_ns"])
			}
		}},
}

// checkLoggerRecord decodes payload as a listener would; parseHostname is
// its Meta.ParseHostname (false only for unixgram).
func checkLoggerRecord(t *testing.T, payload []byte, tc loggerCase, in Flags, parseHostname bool) {
	t.Helper()
	m := testMeta()
	m.RecvNS = time.Now().UnixNano()
	m.ParseHostname = parseHostname
	out, res := NewEncoder().Append(nil, payload, m, in)
	obj := checkLine(t, out, res, in)
	if res.Format != tc.format || res.Flags != in {
		t.Fatalf("payload %q: got %v %v, want %v", payload, res.Format, res.Flags.Names(), tc.format)
	}
	wantMsg, wantSource := "hello world", "mytag"
	if tc.format == FormatRFC3164 && tc.hostname && !parseHostname {
		// On a local socket rsyslog (imuxsock) parses no hostname, so
		// the first word after the timestamp is the TAG.
		wantMsg, wantSource = "mytag: hello world", strings.Fields(string(payload))[3]
	}
	if obj["message"] != wantMsg || obj["source"] != wantSource || obj["level"] != tc.level {
		t.Fatalf("payload %q decoded to %s", payload, out)
	}
	if ts, ok := obj["timestamp"].(string); ok {
		// logger stamps the current time; a wrong year or zone would be
		// far off. Generous bound: this checks decoding, not speed.
		got, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || time.Since(got).Abs() > time.Hour {
			t.Fatalf("timestamp %q (%v) is not about now", ts, err)
		}
	}
	if tc.check != nil {
		tc.check(t, obj)
	}
}

func TestLoggerUnixgram(t *testing.T) {
	logger := needLogger(t)
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "log.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 64<<10)
	for _, tc := range loggerCases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-u", path, "-d", "-t", "mytag"}, tc.args...)
			if out, err := exec.Command(logger, append(args, "hello world")...).CombinedOutput(); err != nil {
				t.Fatalf("logger %v: %v: %s", args, err, out)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			checkLoggerRecord(t, buf[:n], tc, 0, false)
		})
	}
}

// TestLoggerTCPOctetCounted reads RFC 6587 octet-counted frames
// ("LEN SP MSG") from logger over TCP, removes the framing as the tcp
// listener does, and decodes the message.
func TestLoggerTCPOctetCounted(t *testing.T) {
	logger := needLogger(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, tc := range loggerCases {
		if len(tc.args) == 0 || tc.name == "rfc5424 without time and host" {
			continue // the local-only formats
		}
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-T", "-n", "127.0.0.1", "-P", port, "--octet-count", "-t", "mytag"}, tc.args...)
			cmd := exec.Command(logger, append(args, "hello world")...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(c)
			lenField, err := r.ReadString(' ')
			if err != nil {
				t.Fatalf("reading the octet count: %v", err)
			}
			n, err := strconv.Atoi(lenField[:len(lenField)-1])
			if err != nil || n <= 0 || n > 64<<10 {
				t.Fatalf("bad octet count %q", lenField)
			}
			frame := make([]byte, n)
			if _, err := io.ReadFull(r, frame); err != nil {
				t.Fatal(err)
			}
			checkLoggerRecord(t, frame, tc, 0, true)
		})
	}
}
