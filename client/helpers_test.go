package client

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// memConn is an in-memory transport registered as mem://name, used where a
// test wants to see every Write exactly (allocation tests, the slog handler).
type memConn struct {
	mu     sync.Mutex
	data   bytes.Buffer
	msgs   [][]byte
	keep   bool // keep a copy of each message (costs allocations)
	maxMsg int
}

func (m *memConn) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keep {
		m.data.Write(p)
		m.msgs = append(m.msgs, append([]byte(nil), p...))
	}
	return len(p), nil
}
func (m *memConn) Close() error { return nil }

func (m *memConn) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data.String()
}

var (
	memMu    sync.Mutex
	memConns = map[string]*memConn{}
)

func init() {
	registerDialer("mem", func(u *url.URL, _ owners) (Conn, int, error) {
		memMu.Lock()
		defer memMu.Unlock()
		c, ok := memConns[u.Host]
		if !ok {
			return nil, 0, errors.New("no such mem conn")
		}
		return c, c.maxMsg, nil
	})
}

func newMem(t testing.TB, keep bool, maxMsg int) (*memConn, string) {
	t.Helper()
	m := &memConn{keep: keep, maxMsg: maxMsg}
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	memMu.Lock()
	memConns[name] = m
	memMu.Unlock()
	t.Cleanup(func() { memMu.Lock(); delete(memConns, name); memMu.Unlock() })
	return m, "mem://" + name
}

// peerSink collects what a real listener receives: a byte stream for stream
// transports, the list of messages for message transports.
type peerSink struct {
	mu    sync.Mutex
	data  []byte
	msgs  [][]byte
	conns []io.Closer
}

func (s *peerSink) add(p []byte, msg bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data = append(s.data, p...)
	if msg {
		s.msgs = append(s.msgs, append([]byte(nil), p...))
	}
}

func (s *peerSink) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.data...)
}

func (s *peerSink) messages() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.msgs...)
}

// lines returns the records received, one per line, without the record
// separator that starts each record of a packed message (RFC 7464).
func (s *peerSink) lines() []string {
	b := s.bytes()
	if len(b) == 0 {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\x1e")
	}
	return lines
}

// waitLines polls until n complete lines arrived.
func (s *peerSink) waitLines(t *testing.T, n int) []string {
	t.Helper()
	if b, ok := testenv.Until(10*time.Second, func() ([]byte, bool) {
		b := s.bytes()
		return b, bytes.Count(b, []byte{'\n'}) >= n
	}); !ok {
		t.Fatalf("got %d lines, want %d; data: %.300q", bytes.Count(b, []byte{'\n'}), n, b)
	}
	return s.lines()
}

// dropConns closes every accepted connection (the aggregator going away).
func (s *peerSink) dropConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

func tempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// serveStream accepts on l and copies every connection into s.
func serveStream(l net.Listener, s *peerSink) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				s.add(buf[:n], false)
				if err != nil {
					return
				}
			}
		}()
	}
}

func servePacket(pc net.PacketConn, s *peerSink) {
	buf := make([]byte, 128<<10)
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		s.add(buf[:n], true)
	}
}

// listen starts a real listener for scheme and returns its URL and sink.
func listen(t *testing.T, scheme string) (string, *peerSink) {
	t.Helper()
	s := &peerSink{}
	switch scheme {
	case "unix", "tcp":
		addr := "127.0.0.1:0"
		if scheme == "unix" {
			addr = filepath.Join(tempDir(t), "s.sock")
		}
		l, err := net.Listen(scheme, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(); s.dropConns() })
		go serveStream(l, s)
		if scheme == "unix" {
			return "unix://" + addr, s
		}
		return "tcp://" + l.Addr().String(), s
	case "unixgram":
		p := filepath.Join(tempDir(t), "d.sock")
		pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go servePacket(pc, s)
		return "unixgram://" + p, s
	case "udp":
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go servePacket(pc, s)
		// Empty host: the client must fill in 127.0.0.1.
		_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
		return "udp://:" + port, s
	case "fifo":
		p := filepath.Join(tempDir(t), "fifo")
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		// O_RDWR: the reader is also a writer, so it never sees EOF when
		// the client closes, and the open does not block.
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := f.Read(buf)
				s.add(buf[:n], false)
				if err != nil {
					return
				}
			}
		}()
		return "fifo://" + p, s
	}
	t.Fatalf("no listener for %s", scheme)
	return "", nil
}
