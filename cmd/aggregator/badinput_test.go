package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// Each kind of bad input is kept (or refused) and counted, and the good
// records sent around it on the same connection arrive intact.
func TestBadInputIsCountedAndGoodRecordsKept(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--max-record", "1KiB")
	cases := []struct {
		name  string
		bad   string
		kind  string // decode_errors_total kind
		flag  string // agg.flags entry on the kept record
		final bool   // sent last without newline (partial line at EOF)
	}{
		{name: "malformed-json", bad: `{"message": "unterminated`, kind: "malformed_json", flag: "malformed_json"},
		{name: "oversized", bad: strings.Repeat("x", 5000), kind: "truncated", flag: "truncated"},
		{name: "invalid-utf8", bad: "caf\xe9 \xff\xfe", kind: "invalid_utf8", flag: "invalid_utf8"},
		// A NUL ends a frame on a stream (as in syslog-ng); other control
		// bytes stay in the record, escaped and flagged.
		{name: "control-bytes", bad: "bin\x01ary \x1b[31mred", kind: "control_chars", flag: "control_chars"},
		{name: "partial-at-eof", bad: "no newline at the end", kind: "partial", flag: "partial", final: true},
	}
	for _, c := range cases {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		payload := fmt.Sprintf("{\"message\":\"good-before-%s\"}\n%s", c.name, c.bad)
		if !c.final {
			payload += fmt.Sprintf("\n{\"message\":\"good-after-%s\"}\n", c.name)
		}
		if _, err := conn.Write([]byte(payload)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	p.waitMetric(float64(2*len(cases)-1), "logagg_records_out_total")
	counts := map[string]float64{}
	for _, c := range cases {
		counts[c.kind] = p.metric("logagg_decode_errors_total", `kind="`+c.kind+`"`)
	}
	p.stop(syscall.SIGTERM)
	recs := readRecords(t, p.output) // fails on any invalid JSON line
	byMsg := map[string]map[string]any{}
	for _, r := range recs {
		if m, ok := r["message"].(string); ok {
			byMsg[m] = r
		}
	}
	for _, c := range cases {
		if counts[c.kind] < 1 {
			t.Errorf("%s: decode_errors_total{kind=%q} = %v, want >= 1", c.name, c.kind, counts[c.kind])
		}
		if byMsg["good-before-"+c.name] == nil || (!c.final && byMsg["good-after-"+c.name] == nil) {
			t.Errorf("%s: good records around the bad one are missing", c.name)
		}
		found := false
		for _, r := range recs {
			if hasFlag(r, c.flag) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no kept record flagged %q:\n%s", c.name, c.flag, describe(recs))
		}
	}
	for _, r := range recs {
		if hasFlag(r, "truncated") {
			if m, _ := r["message"].(string); len(m) > 1024 {
				t.Errorf("truncated record is %d bytes, want <= 1024", len(m))
			}
		}
	}
}

// A connection that sends half a line and stalls does not hold up others.
// At --max-conns the aggregator stops accepting: a client beyond the limit
// waits in the backlog with what it wrote, and is read once a slot frees.
func TestStallAndConnectionLimit(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--max-conns", "3", "--drain-timeout", "3s")
	var stalled []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(`{"message":"half a li`)) // and then nothing
		stalled = append(stalled, c)
	}
	good, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p.waitMetric(3, "logagg_connections")
	fmt.Fprintln(good, `{"message":"not blocked by stalled peers"}`)
	if v := p.waitMetric(1, "logagg_records_out_total"); v < 1 {
		t.Fatal("a stalled connection blocked another connection's record")
	}
	extra, err := net.Dial("unix", sock) // completes: the kernel queues it
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(extra, `{"message":"waited for a slot"}`)
	extra.Close()
	if v := p.metric("logagg_connections_accepted_total"); v != 3 {
		t.Fatalf("accepted %v connections with --max-conns 3, want 3", v)
	}
	good.Close() // frees a slot
	if v := p.waitMetric(2, "logagg_records_out_total"); v != 2 {
		t.Fatalf("records_out = %v after a slot freed, want 2 (the waiting client's record)", v)
	}
	if v := p.metric("logagg_dropped_total"); v != 0 {
		t.Errorf("dropped_total = %v, want 0", v)
	}
	p.stop(syscall.SIGTERM) // must not wait for the stalled peers past the drain
	for _, c := range stalled {
		c.Close()
	}
	recs := readRecords(t, p.output)
	partial := 0
	for _, r := range recs {
		if hasFlag(r, "partial") {
			partial++
		}
	}
	if partial != 2 {
		t.Errorf("%d partial records kept from the stalled connections at shutdown, want 2:\n%s", partial, describe(recs))
	}
}

// Many connect/disconnect cycles: the aggregator's fds and goroutines return
// to their baseline.
func TestNoLeaksAcrossConnectionCycles(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--listen", "tcp://127.0.0.1:0")
	tcpAddr := strings.TrimPrefix(p.url("tcp"), "tcp://")
	pid := p.pid()
	fds := func() int {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	// Warm up once so lazily created fds exist: the metrics server's
	// connection, the poller, and the socket-diagnostics socket that peer
	// lookups of loopback TCP connections keep open (peerid).
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "{\"message\":\"warm-up\"}\n")
	c.Close()
	p.waitMetric(1, "logagg_records_out_total")
	baseFDs := fds()
	baseG := p.metric("go_goroutines")
	const cycles = 300
	for i := 0; i < cycles; i++ {
		network, addr := "unix", sock
		if i%2 == 1 {
			network, addr = "tcp", tcpAddr
		}
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "{\"message\":\"cycle %d\"}\n", i)
		c.Close()
	}
	p.waitMetric(cycles+1, "logagg_records_out_total")
	type open struct {
		fds        int
		goroutines float64
	}
	last, ok := testenv.Until(10*time.Second, func() (open, bool) {
		f, g := fds(), p.metric("go_goroutines")
		return open{f, g}, f <= baseFDs && g <= baseG+2
	})
	if !ok {
		t.Fatalf("leak after %d cycles: fds %d (baseline %d), goroutines %v (baseline %v)", cycles, last.fds, baseFDs, last.goroutines, baseG)
	}
	t.Logf("after %d cycles: fds %d (baseline %d), goroutines %v (baseline %v)", cycles, last.fds, baseFDs, last.goroutines, baseG)
	p.stop(syscall.SIGTERM)
}

// TestEveryByteAccounted sends every kind of bad input over a stream and a
// message transport of each family and checks, from the output file and
// the metrics, that no received byte disappeared: the messages of the
// records written, plus the framing bytes the test sent, plus the bytes
// counted in dropped_bytes_total, equal bytes_in_total, which equals what
// was sent; and records_in_total equals records_out_total. Every input is
// plain text, so each record's message is its input bytes (an invalid
// UTF-8 byte comes back as one U+FFFD).
func TestEveryByteAccounted(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	p := startAgg(t, dir, "--max-record", "1KiB",
		"--listen", "unix://"+filepath.Join(dir, "s.sock"), "--listen", "tcp://127.0.0.1:0",
		"--listen", "unixgram://"+filepath.Join(dir, "d.sock"), "--listen", "udp://127.0.0.1:0")
	bad := []string{
		"plain good line",
		`{"message": "unterminated`,
		strings.Repeat("x", 5000), // over --max-record: pieces on streams, cut on datagrams
		"caf\xe9 \xff\xfe",
		"bin\x00ary\x01data",
		"ansi \x1b[31mred\x1b[0m and DEL \x7f",
		"multi\nline\nmessage",
		"trailing NUL\x00",
		"",
		"last without delimiter",
	}
	type target struct{ network, addr string }
	targets := []target{
		{"unix", filepath.Join(dir, "s.sock")}, {"tcp", strings.TrimPrefix(p.url("tcp"), "tcp://")},
		{"unixgram", filepath.Join(dir, "d.sock")}, {"udp", strings.TrimPrefix(p.url("udp"), "udp://")},
	}
	sent := map[string]int{}
	framing := map[string]int{} // bytes that are delimiters, not messages
	for _, tg := range targets {
		conn, err := net.Dial(tg.network, tg.addr)
		if err != nil {
			t.Fatal(err)
		}
		listener := tg.network + "://"
		if tg.network == "unix" || tg.network == "unixgram" {
			listener += tg.addr
		} else {
			listener = p.url(tg.network)
		}
		if tg.network == "unix" || tg.network == "tcp" {
			stream := strings.Join(bad, "\n")
			if _, err := conn.Write([]byte(stream)); err != nil {
				t.Fatal(err)
			}
			sent[listener] += len(stream)
			// Newline framing: every newline and NUL ends a frame.
			framing[listener] += strings.Count(stream, "\n") + strings.Count(stream, "\x00")
		} else {
			for _, b := range bad {
				d := b + "\n"
				if _, err := conn.Write([]byte(d)); err != nil {
					t.Fatal(err)
				}
				sent[listener] += len(d)
				if len(d) > 1024 {
					continue // cut by the kernel: the newline is among the dropped bytes
				}
				framing[listener]++ // the trailing newline
				if strings.HasSuffix(b, "\x00") {
					framing[listener]++ // ...and a NUL before it is removed too
				}
			}
		}
		conn.Close()
	}
	type counts struct{ in, out, dropped float64 }
	final := map[string]counts{}
	for l, n := range sent {
		lbl := `listener="` + l + `"`
		if got := p.waitMetric(float64(n), "logagg_bytes_in_total", lbl); got != float64(n) {
			t.Fatalf("%s: bytes_in_total = %v, sent %d", l, got, n)
		}
		in := p.metric("logagg_records_in_total", lbl)
		final[l] = counts{in, p.waitMetric(in, "logagg_records_out_total", lbl), p.metric("logagg_dropped_bytes_total", lbl)}
	}
	p.stop(syscall.SIGTERM)
	recs := readRecords(t, p.output)
	kept := map[string]int{}
	records := map[string]int{}
	for _, r := range recs {
		a := agg(r)
		l, _ := a["listener"].(string)
		msg, _ := r["message"].(string)
		n := len(msg)
		if hasFlag(r, "invalid_utf8") { // each U+FFFD stood for one input byte
			n -= strings.Count(msg, "\ufffd") * (len("\ufffd") - 1)
		}
		kept[l] += n
		records[l]++
	}
	for l, n := range sent {
		dropped := int(final[l].dropped)
		if kept[l]+framing[l]+dropped != n {
			t.Errorf("%s: %d bytes in messages + %d framing + %d dropped != %d received", l, kept[l], framing[l], dropped, n)
		}
		if in, out := final[l].in, final[l].out; in != out || int(out) != records[l] {
			t.Errorf("%s: records_in %v, records_out %v, records in the file %d", l, in, out, records[l])
		}
		t.Logf("%s: %d bytes received = %d in messages + %d framing + %d dropped; %d records", l, n, kept[l], framing[l], dropped, records[l])
	}
}
