package transport

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fileOf returns a duplicate of c's socket as an *os.File and closes c, as
// a service manager's socket arrives: a bare descriptor.
func fileOf(t *testing.T, c interface{ File() (*os.File, error) }) *os.File {
	t.Helper()
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	c.(interface{ Close() error }).Close()
	return f
}

func TestInheritedMatching(t *testing.T) {
	dir := t.TempDir()
	streamPath := filepath.Join(dir, "s.sock")
	dgramPath := filepath.Join(dir, "d.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: streamPath, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	uc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dgramPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tcpAddr := tl.Addr().(*net.TCPAddr).AddrPort()
	ud, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	udpAddr := ud.LocalAddr().(*net.UDPAddr).AddrPort()

	in := NewInherited()
	for i, c := range []interface{ File() (*os.File, error) }{ul, uc, tl, ud} {
		name := []string{"app", "devlog", "unknown", "unknown"}[i]
		if err := in.Add(fileOf(t, c), 3+i, name); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(in.Close)

	// A socket of the wrong type under the asked name is an error.
	if _, err := in.Take("devlog", unix.SOCK_STREAM, MatchPath(streamPath)); !errors.Is(err, ErrBadAddress) {
		t.Fatalf("stream listener given datagram socket %q: err %v, want ErrBadAddress", "devlog", err)
	}
	// By name, wherever it is bound.
	s, err := in.Take("app", unix.SOCK_STREAM, MatchPath("/elsewhere"))
	if err != nil || s == nil || s.Path != streamPath || !s.Listening {
		t.Fatalf("by name: %v, %v", s, err)
	}
	ln, err := s.Listener()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := os.Stat(streamPath); err != nil {
		t.Fatalf("closing an inherited unix listener removed its file: %v", err)
	}
	// By path, with SO_PASSCRED set for credentials.
	s, err = in.Take("", unix.SOCK_DGRAM, MatchPath(dgramPath))
	if err != nil || s == nil {
		t.Fatalf("by path: %v, %v", s, err)
	}
	if v, err := unix.GetsockoptInt(int(s.file.Fd()), unix.SOL_SOCKET, unix.SO_PASSCRED); err != nil || v != 1 {
		t.Fatalf("SO_PASSCRED = %d, %v; want 1", v, err)
	}
	s.Close()
	// A name nobody passed falls back to the address.
	if s, err := in.Take("nosuch", unix.SOCK_DGRAM, MatchAddr(udpAddr)); err != nil || s == nil || s.Addr != udpAddr {
		t.Fatalf("udp by address: %v, %v", s, err)
	} else {
		s.Close()
	}
	// Another port, or port 0, is not a match: the listener binds its own.
	if s, err := in.Take("", unix.SOCK_STREAM, MatchAddr(netip.AddrPortFrom(tcpAddr.Addr(), 0))); s != nil || err != nil {
		t.Fatalf("port 0 matched %v, %v", s, err)
	}
	if err := in.CheckAllTaken(); !errors.Is(err, ErrUnusedSocket) || !strings.Contains(err.Error(), "tcp://"+tcpAddr.String()) {
		t.Fatalf("unused TCP socket: %v", err)
	}
	// 0.0.0.0 and :: are one address to a listener.
	if !MatchAddr(netip.MustParseAddrPort("0.0.0.0:514"))(&InheritedSocket{Family: unix.AF_INET6, Addr: netip.MustParseAddrPort("[::]:514")}) {
		t.Error("tcp://0.0.0.0:514 does not match a socket on [::]:514")
	}
	if s, err := in.Take("", unix.SOCK_STREAM, MatchAddr(tcpAddr)); err != nil || s == nil {
		t.Fatalf("tcp by address: %v, %v", s, err)
	} else {
		s.Close()
	}
	if err := in.CheckAllTaken(); err != nil {
		t.Fatalf("all taken: %v", err)
	}
}

func TestInheritedNonSocketRefused(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := NewInherited().Add(f, 3, "x"); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Add(/dev/null) = %v, want 'not a socket'", err)
	}
}

func TestSplitFDName(t *testing.T) {
	for _, c := range []struct{ in, out, name string }{
		{"unixgram:///dev/log?fdname=devlog", "unixgram:///dev/log", "devlog"},
		{"tcp://127.0.0.1:514", "tcp://127.0.0.1:514", ""},
		{"shm:///run/x.sock?size=4MiB&fdname=shm", "shm:///run/x.sock?size=4MiB", "shm"},
	} {
		out, name, err := SplitFDName(c.in)
		if err != nil || out != c.out || name != c.name {
			t.Errorf("SplitFDName(%q) = %q, %q, %v; want %q, %q", c.in, out, name, err, c.out, c.name)
		}
	}
}
