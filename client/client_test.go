package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/framing"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/leodido/go-syslog/v4/rfc3164"
	"github.com/leodido/go-syslog/v4/rfc5424"
)

var allSchemes = []string{"unix", "unixgram", "tcp", "udp", "fifo"}

// TestEverySchemeSeq sends stamped records over every transport, buffered
// and not, and checks that each arrives once, in order, as valid JSON.
func TestEverySchemeSeq(t *testing.T) {
	for _, scheme := range allSchemes {
		for _, buf := range []int{0, 1000} {
			t.Run(fmt.Sprintf("%s/buf%d", scheme, buf), func(t *testing.T) {
				u, s := listen(t, scheme)
				w, err := Dial(u, WithSeq("t-1"), WithSource("producer-1"), WithBuffer(buf))
				if err != nil {
					t.Fatal(err)
				}
				const n = 50
				for i := 0; i < n; i++ {
					if err := w.Log("INFO", fmt.Sprintf("hello %d \"quoted\"\n", i)); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				lines := s.waitLines(t, n)
				if len(lines) != n {
					t.Fatalf("got %d lines, want %d", len(lines), n)
				}
				for i, l := range lines {
					var m map[string]any
					if err := json.Unmarshal([]byte(l), &m); err != nil {
						t.Fatalf("line %d not JSON: %v: %s", i, err, l)
					}
					if m["source"] != "producer-1" || m["level"] != "INFO" || m["message"] != fmt.Sprintf("hello %d \"quoted\"\n", i) {
						t.Errorf("line %d: %s", i, l)
					}
					if _, err := time.Parse(time.RFC3339Nano, m["timestamp"].(string)); err != nil {
						t.Errorf("line %d timestamp: %v", i, err)
					}
					st, ok := seqstamp.Find([]byte(l))
					if !ok || st.Producer != "t-1" || st.Seq != uint64(i+1) || st.SentNS == 0 {
						t.Errorf("line %d: stamp %+v %v", i, st, ok)
					}
				}
				if w.Sent() != n || w.Failed() != 0 {
					t.Errorf("Sent=%d Failed=%d", w.Sent(), w.Failed())
				}
				if got := uint64(len(s.bytes())); w.BytesSent() != got {
					t.Errorf("BytesSent=%d, listener got %d", w.BytesSent(), got)
				}
			})
		}
	}
}

// TestLocalRFC3164 checks that RFC 3164 records sent to a unix datagram
// socket carry no hostname, as glibc's syslog(3) writes them to /dev/log:
// receivers do not parse one there (rsyslog's imuxsock, our unixgram
// listener).
func TestLocalRFC3164(t *testing.T) {
	for _, scheme := range []string{"unixgram"} {
		u, s := listen(t, scheme)
		w, err := Dial(u, WithFormat(FormatRFC3164), WithSource("app"), WithHostname("host1"))
		if err != nil {
			t.Fatal(err)
		}
		w.WriteRecord(time.Date(2025, 3, 7, 9, 5, 3, 0, time.UTC), "INFO", "hi")
		w.Close()
		if line, want := s.waitLines(t, 1)[0], `^<14>Mar  7 09:05:03 app\[\d+\]: hi$`; !regexp.MustCompile(want).MatchString(line) {
			t.Errorf("%s: got %q, want %s", scheme, line, want)
		}
	}
}

func TestFormats(t *testing.T) {
	ts := time.Date(2025, 3, 7, 9, 5, 3, 123456789, time.UTC)
	cases := []struct {
		format Format
		want   string // regexp of the whole line
	}{
		{FormatJSON, `^\{"source":"app","timestamp":"2025-03-07T09:05:03.123456789Z","level":"WARN","message":"a\\tb","producer_id":"p-9","seq":1,"sent_ns":\d+\}$`},
		{FormatRaw, `^producer_id=p-9 seq=1 sent_ns=\d+ a\tb$`},
		{FormatRFC3164, `^<12>Mar  7 09:05:03 host1 app\[\d+\]: producer_id=p-9 seq=1 sent_ns=\d+ a\tb$`},
		{FormatRFC5424, `^<12>1 2025-03-07T09:05:03.123456Z host1 app \d+ - - producer_id=p-9 seq=1 sent_ns=\d+ a\tb$`},
	}
	for _, c := range cases {
		t.Run(c.format.String(), func(t *testing.T) {
			f, err := ParseFormat(c.format.String())
			if err != nil || f != c.format {
				t.Fatalf("ParseFormat: %v %v", f, err)
			}
			u, s := listen(t, "tcp")
			w, err := Dial(u, WithFormat(c.format), WithSource("app"), WithHostname("host1"), WithSeq("p-9"))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WriteRecord(ts, "WARN", "a\tb"); err != nil {
				t.Fatal(err)
			}
			w.Close()
			line := s.waitLines(t, 1)[0]
			if !regexp.MustCompile(c.want).MatchString(line) {
				t.Fatalf("got  %q\nwant %s", line, c.want)
			}
			if st, ok := seqstamp.Find([]byte(line)); !ok || st.Seq != 1 || st.Producer != "p-9" {
				t.Errorf("stamp %+v %v", st, ok)
			}
			switch c.format {
			case FormatRFC3164:
				m, err := rfc3164.NewParser().Parse([]byte(line))
				if err != nil {
					t.Fatalf("rfc3164 parser: %v", err)
				}
				sm := m.(*rfc3164.SyslogMessage)
				if *sm.Severity != 4 || *sm.Facility != 1 || *sm.Appname != "app" || *sm.Hostname != "host1" {
					t.Errorf("parsed %+v", sm)
				}
			case FormatRFC5424:
				m, err := rfc5424.NewParser().Parse([]byte(line))
				if err != nil {
					t.Fatalf("rfc5424 parser: %v", err)
				}
				sm := m.(*rfc5424.SyslogMessage)
				if *sm.Severity != 4 || *sm.Appname != "app" || !strings.HasSuffix(*sm.Message, "a\tb") {
					t.Errorf("parsed %+v", sm)
				}
			}
		})
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("ParseFormat accepted xml")
	}
}

func TestTextFormatsKeepOneLine(t *testing.T) {
	u, s := listen(t, "unix")
	w, err := Dial(u, WithFormat(FormatRaw))
	if err != nil {
		t.Fatal(err)
	}
	w.Log("INFO", "one\ntwo\r\nthree")
	w.Write([]byte("pre-formatted")) // newline added
	w.Close()
	lines := s.waitLines(t, 2)
	if lines[0] != "one two  three" || lines[1] != "pre-formatted" {
		t.Fatalf("lines %q", lines)
	}
}

func TestJSONEscaping(t *testing.T) {
	in := "q\" b\\ nl\n nul\x00 bad\xff é 😀"
	got := appendJSONString(nil, in)
	var out string
	if err := json.Unmarshal(got, &out); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if want := strings.ToValidUTF8(in, "\ufffd"); out != want {
		t.Fatalf("round trip %q, want %q", out, want)
	}
}

// TestStreamBufferWrites checks the setvbuf behaviour: B bytes through a
// buffer of n bytes cost ceil(B/n) writes, and the bytes arrive intact.
func TestStreamBufferWrites(t *testing.T) {
	for _, scheme := range []string{"unix", "tcp", "fifo"} {
		for _, buf := range []int{0, 1, 100, 4096} {
			t.Run(fmt.Sprintf("%s/%d", scheme, buf), func(t *testing.T) {
				u, s := listen(t, scheme)
				w, err := Dial(u, WithBuffer(buf), WithFormat(FormatRaw))
				if err != nil {
					t.Fatal(err)
				}
				const n = 100
				msg := strings.Repeat("x", 99) // 100 B records
				for i := 0; i < n; i++ {
					if err := w.Log("INFO", msg); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				total := uint64(n * 100)
				want := uint64(n)
				if buf > 0 {
					want = (total + uint64(buf) - 1) / uint64(buf)
				}
				if w.Writes() != want {
					t.Errorf("writes=%d, want %d", w.Writes(), want)
				}
				s.waitLines(t, n)
				if got := string(s.bytes()); got != strings.Repeat(msg+"\n", n) {
					t.Errorf("stream corrupted (%d bytes)", len(got))
				}
				if w.Sent() != n || w.BytesSent() != total {
					t.Errorf("Sent=%d BytesSent=%d", w.Sent(), w.BytesSent())
				}
			})
		}
	}
}

// TestDatagramPacking checks that buffered message transports pack whole
// records as RFC 7464 sequences (RS before each record), never more than
// the limit, and never split one.
func TestDatagramPacking(t *testing.T) {
	for _, scheme := range []string{"unixgram", "udp"} {
		t.Run(scheme, func(t *testing.T) {
			u, s := listen(t, scheme)
			const limit = 1000
			w, err := Dial(u, WithBuffer(limit), WithFormat(FormatRaw), WithSeq("d"))
			if err != nil {
				t.Fatal(err)
			}
			const n = 200
			for i := 0; i < n; i++ {
				// Sizes 40..~400 so that records rarely fill a message exactly.
				if err := w.Log("INFO", strings.Repeat("y", 7*(i%50))); err != nil {
					t.Fatal(err)
				}
			}
			w.Log("INFO", strings.Repeat("z", 3000)) // larger than the buffer: sent alone
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			s.waitLines(t, n+1)
			msgs := s.messages()
			if uint64(len(msgs)) != w.Writes() {
				t.Errorf("%d messages, %d writes", len(msgs), w.Writes())
			}
			if len(msgs) >= n/2 {
				t.Errorf("%d messages for %d records: not packed", len(msgs), n)
			}
			var seq uint64
			for i, m := range msgs {
				if m[len(m)-1] != '\n' {
					t.Fatalf("message %d does not end a record: %.80q", i, m)
				}
				if m[0] != 0x1e {
					t.Fatalf("message %d does not start with the record separator: %.80q", i, m)
				}
				lines := strings.Split(strings.TrimSuffix(string(m), "\n"), "\n")
				if len(m) > limit && len(lines) > 1 {
					t.Errorf("message %d is %d bytes with %d records", i, len(m), len(lines))
				}
				for _, l := range lines {
					if l[0] != 0x1e {
						t.Fatalf("message %d: record without separator: %.80q", i, l)
					}
					l = l[1:]
					st, ok := seqstamp.Find([]byte(l))
					if !ok || st.Seq != seq+1 {
						t.Fatalf("message %d: record %.60q: stamp %+v %v, want seq %d", i, l, st, ok, seq+1)
					}
					seq = st.Seq
				}
			}
			if seq != n+1 || w.Sent() != n+1 {
				t.Errorf("last seq %d, Sent %d, want %d", seq, w.Sent(), n+1)
			}
		})
	}
}

// TestReconnect closes the listener and every connection, re-creates it at
// the same address, and checks that nothing the client counted as sent is
// missing and that the Writer redialed.
func TestReconnect(t *testing.T) {
	for _, scheme := range []string{"unix", "tcp"} {
		for _, buf := range []int{0, 150} {
			t.Run(fmt.Sprintf("%s/buf%d", scheme, buf), func(t *testing.T) {
				var addr string
				if scheme == "unix" {
					addr = filepath.Join(tempDir(t), "r.sock")
				} else {
					addr = "127.0.0.1:0"
				}
				s1 := &peerSink{}
				l1, err := net.Listen(scheme, addr)
				if err != nil {
					t.Fatal(err)
				}
				addr = l1.Addr().String()
				go serveStream(l1, s1)
				w, err := Dial(scheme+"://"+addr, WithSeq("r"), WithBuffer(buf), WithReconnect(2*time.Millisecond, 20*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				for i := 0; i < 10; i++ {
					if err := w.Log("INFO", "before"); err != nil {
						t.Fatal(err)
					}
				}
				// Unflushed: with a buffer, the last chunk ended inside a
				// record, whose head went to the connection about to die.
				s1.waitLines(t, int(w.Sent()))
				if buf > 0 && w.Sent() == 10 {
					t.Fatalf("expected a record straddling the buffer, Sent=%d", w.Sent())
				}
				// The aggregator goes away.
				l1.Close()
				s1.dropConns()
				// Wait until the client has seen the close, so that the test
				// is about redialing, not about TCP's silent first write.
				testenv.Eventually(t, 5*time.Second, "the client to notice the peer closing", func() bool {
					w.mu.Lock()
					defer w.mu.Unlock()
					return w.peer.gone.Load()
				})
				// ... and comes back at the same address a little later.
				s2 := &peerSink{}
				go func() {
					// Not an ordering: the 30 ms are the outage the client rides out.
					time.Sleep(30 * time.Millisecond)
					l2, err := net.Listen(scheme, addr)
					if err != nil {
						t.Error(err)
						return
					}
					t.Cleanup(func() { l2.Close(); s2.dropConns() })
					serveStream(l2, s2)
				}()
				for i := 0; i < 10; i++ {
					if err := w.Log("INFO", "after"); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				// Only complete lines of the first connection count: the
				// aggregator flags a trailing fragment as partial.
				b1 := s1.bytes()
				b1 = b1[:strings.LastIndexByte(string(b1), '\n')+1]
				lines := s2.waitLines(t, 20-strings.Count(string(b1), "\n"))
				if len(b1) > 0 {
					lines = append(strings.Split(strings.TrimSuffix(string(b1), "\n"), "\n"), lines...)
				}
				seen := map[uint64]int{}
				for _, l := range lines {
					st, ok := seqstamp.Find([]byte(l))
					if !ok || !json.Valid([]byte(l)) {
						t.Fatalf("unstamped or broken line %q", l)
					}
					seen[st.Seq]++
				}
				for i := uint64(1); i <= 20; i++ {
					if seen[i] != 1 {
						t.Errorf("seq %d seen %d times", i, seen[i])
					}
				}
				if w.Reconnects() != 1 || w.Sent() != 20 || w.Failed() != 0 {
					t.Errorf("Reconnects=%d Sent=%d Failed=%d", w.Reconnects(), w.Sent(), w.Failed())
				}
			})
		}
	}
}

// TestReconnectWriteError covers the path where the write itself fails
// (unix stream peers refuse writes at once with EPIPE) and the peer watcher
// had no chance to notice first.
func TestReconnectWriteError(t *testing.T) {
	p := filepath.Join(tempDir(t), "e.sock")
	l1, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	s1 := &peerSink{}
	go serveStream(l1, s1)
	w, err := Dial("unix://"+p, WithSeq("e"), WithReconnect(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Log("INFO", "one")
	s1.waitLines(t, 1)
	w.mu.Lock()
	w.peer = nil // blind the watcher: only the failed write can tell
	w.mu.Unlock()
	l1.Close()
	s1.dropConns()
	l2, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	s2 := &peerSink{}
	go serveStream(l2, s2)
	defer func() { l2.Close(); s2.dropConns() }()
	if err := w.Log("INFO", "two"); err != nil {
		t.Fatal(err)
	}
	line := s2.waitLines(t, 1)[0]
	if st, _ := seqstamp.Find([]byte(line)); st.Seq != 2 {
		t.Fatalf("after reconnect got %q", line)
	}
	if w.Reconnects() != 1 || w.Failed() != 0 {
		t.Errorf("Reconnects=%d Failed=%d", w.Reconnects(), w.Failed())
	}
}

func TestReconnectGivesUp(t *testing.T) {
	u, s := listen(t, "unix")
	w, err := Dial(u, WithReconnect(time.Millisecond, 5*time.Millisecond), WithReconnectGiveUp(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Log("INFO", "x")
	s.waitLines(t, 1)
	w.mu.Lock()
	w.peer = nil
	w.mu.Unlock()
	s.dropConns()
	// Remove the socket so that redialing cannot succeed.
	path := strings.TrimPrefix(u, "unix://")
	if err := syscall.Unlink(path); err != nil {
		t.Fatal(err)
	}
	err = w.Log("INFO", "y")
	if !errors.Is(err, ErrNotConnected) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
	if w.Failed() != 1 || w.Sent() != 1 {
		t.Errorf("Failed=%d Sent=%d", w.Failed(), w.Sent())
	}
}

func TestNoReconnectFails(t *testing.T) {
	u, s := listen(t, "unix")
	w, err := Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Log("INFO", "x")
	s.waitLines(t, 1)
	s.dropConns()
	// Unix stream: the first write after the peer closed fails (EPIPE).
	err = w.Log("INFO", "y")
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("err = %v", err)
	}
	if w.Failed() != 1 {
		t.Errorf("Failed=%d", w.Failed())
	}
}

func TestDialErrors(t *testing.T) {
	dir := tempDir(t)
	_, err := Dial("unix://" + filepath.Join(dir, "none.sock"))
	var de *DialError
	if !errors.As(err, &de) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unix: %v", err)
	}
	_, err = Dial("fifo://" + filepath.Join(dir, "none"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("fifo missing: %v", err)
	}
	p := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Dial("fifo://" + p)
	if !errors.Is(err, ErrNoReader) {
		t.Errorf("fifo without reader: %v", err)
	}
	_, err = Dial("fifo://" + dir)
	if !errors.Is(err, ErrBadURL) {
		t.Errorf("fifo on a directory: %v", err)
	}
	_, err = Dial("carrier-pigeon://x")
	if !errors.Is(err, ErrUnknownScheme) {
		t.Errorf("unknown scheme: %v", err)
	}
	_, err = Dial("tcp://no-port")
	if !errors.Is(err, ErrBadURL) {
		t.Errorf("tcp without port: %v", err)
	}
}

func TestClosed(t *testing.T) {
	_, u := newMem(t, true, 0)
	w, err := Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := w.Log("INFO", "late"); !errors.Is(err, ErrClosed) {
		t.Errorf("Log after Close: %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if w.Failed() != 1 {
		t.Errorf("Failed=%d", w.Failed())
	}
}

func TestEncodedLen(t *testing.T) {
	m, u := newMem(t, true, 0)
	w, err := Dial(u, WithSeq("p"))
	if err != nil {
		t.Fatal(err)
	}
	n := w.EncodedLen("INFO", "hello")
	w.Log("INFO", "hello")
	w.Close()
	// Same seq (1) in both, so only the time can change the length by a
	// few digits (RFC3339Nano drops trailing zeros).
	if got := len(m.String()); got < n-10 || got > n+10 {
		t.Errorf("EncodedLen %d, actual %d", n, got)
	}
	if st, _ := seqstamp.Find([]byte(m.String())); st.Seq != 1 {
		t.Errorf("EncodedLen consumed a seq number: %+v", st)
	}
}

// TestNoAllocs: the hot path formats into reused buffers.
func TestNoAllocs(t *testing.T) {
	for _, f := range []Format{FormatJSON, FormatRaw, FormatRFC3164, FormatRFC5424} {
		for _, buf := range []int{0, 4096} {
			_, u := newMem(t, false, 0)
			w, err := Dial(u, WithFormat(f), WithSeq("a-1"), WithBuffer(buf))
			if err != nil {
				t.Fatal(err)
			}
			msg := strings.Repeat("m", 80)
			allocs := testing.AllocsPerRun(1000, func() {
				if err := w.Log("INFO", msg); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v buffer %d: %.1f allocs per record", f, buf, allocs)
			}
			w.Close()
		}
	}
	// And through a real unix socket.
	u, _ := listen(t, "unix")
	w, err := Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if a := testing.AllocsPerRun(200, func() { w.Log("INFO", "x") }); a != 0 {
		t.Errorf("unix socket: %.1f allocs per record", a)
	}
}

func BenchmarkLog(b *testing.B) {
	msg := strings.Repeat("m", 60)
	for _, f := range []Format{FormatJSON, FormatRaw, FormatRFC3164, FormatRFC5424} {
		b.Run(f.String(), func(b *testing.B) {
			_, u := newMem(b, false, 0)
			w, err := Dial(u, WithFormat(f), WithSeq("bench-1"), WithBuffer(64<<10))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(w.EncodedLen("INFO", msg)))
			b.ReportAllocs()
			for b.Loop() {
				w.Log("INFO", msg)
			}
			w.Close()
		})
	}
}

// BenchmarkUnixSocket measures the real cost per record through a unix
// stream socket for several buffer sizes (seed 003's knob).
func BenchmarkUnixSocket(b *testing.B) {
	for _, buf := range []int{0, 4096, 65536} {
		b.Run(fmt.Sprintf("buf%d", buf), func(b *testing.B) {
			d := b.TempDir()
			l, err := net.Listen("unix", filepath.Join(d, "b.sock"))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				p := make([]byte, 1<<20)
				for {
					if _, err := c.Read(p); err != nil {
						return
					}
				}
			}()
			w, err := Dial("unix://"+filepath.Join(d, "b.sock"), WithBuffer(buf))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				w.Log("INFO", "benchmark message of about one hundred bytes in total")
			}
			w.Close()
			b.ReportMetric(float64(w.Writes())/float64(b.N), "writes/op")
		})
	}
}

// TestMultiLineRecordOneMessage checks that a record whose message holds
// newlines stays one record on message transports, packed or not: the
// aggregator reads a message as one record (internal/framing).
func TestMultiLineRecordOneMessage(t *testing.T) {
	for _, buf := range []int{0, 1000} {
		t.Run(fmt.Sprintf("buf%d", buf), func(t *testing.T) {
			u, s := listen(t, "unixgram")
			w, err := Dial(u, WithBuffer(buf), WithFormat(FormatRaw))
			if err != nil {
				t.Fatal(err)
			}
			w.Log("INFO", "first\nsecond\nthird")
			w.Log("INFO", "alone")
			if _, err := w.Write([]byte("line one\nline two\n")); err != nil { // Write: lines are records
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			recs, _ := testenv.Until(10*time.Second, func() ([]string, bool) {
				var recs []string
				for _, m := range s.messages() {
					framing.Message(m, 0, false, func(r []byte, _ record.Flags) { recs = append(recs, string(r)) })
				}
				return recs, len(recs) >= 4
			})
			want := []string{"first\nsecond\nthird", "alone", "line one", "line two"}
			if !slices.Equal(recs, want) {
				t.Fatalf("records %q, want %q", recs, want)
			}
		})
	}
}
