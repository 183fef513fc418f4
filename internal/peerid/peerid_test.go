package peerid

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/testenv"
)

// generous is the budget of the tests: they check correctness, not cost,
// on a loaded machine running -race.
var generous = Budget{MaxTime: 10 * time.Second}

// TestHelperProcess is not a test: it is the peer process the tests start
// (the exec test helper pattern). It connects or opens what PEERID_HELPER
// says, prints "ready", and holds it until its stdin closes.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("PEERID_HELPER")
	if mode == "" {
		t.Skip("helper process only")
	}
	arg := os.Getenv("PEERID_ARG")
	var hold io.Closer
	var err error
	switch mode {
	case "tcp":
		var c net.Conn
		c, err = net.Dial("tcp", arg)
		if err == nil {
			_, err = c.Write([]byte("hello\n"))
		}
		hold = c
	case "udp": // connected socket
		var c net.Conn
		c, err = net.Dial("udp", arg)
		if err == nil {
			_, err = c.Write([]byte("hello"))
		}
		hold = c
	case "udpu": // unconnected socket, sendto
		var c *net.UDPConn
		c, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err == nil {
			var dst *net.UDPAddr
			if dst, err = net.ResolveUDPAddr("udp", arg); err == nil {
				_, err = c.WriteToUDP([]byte("hello"), dst)
			}
		}
		hold = c
	case "setuid": // effective ids 65534, real ids 0: not dumpable
		if err = syscall.Setresgid(0, 65534, 0); err == nil {
			err = syscall.Setresuid(0, 65534, 0)
		}
		hold = io.NopCloser(nil)
	case "fifow":
		hold, err = os.OpenFile(arg, os.O_WRONLY, 0)
	case "fifor":
		var fd int
		fd, err = unix.Open(arg, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		hold = os.NewFile(uintptr(fd), arg)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	hold.Close()
	os.Exit(0)
}

// startHelper starts the helper in mode and waits until it is ready. It is
// stopped at the end of the test.
func startHelper(t *testing.T, mode, arg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "PEERID_HELPER="+mode, "PEERID_ARG="+arg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper %s did not get ready: %q %v", mode, line, err)
	}
	return cmd
}

func checkPeer(t *testing.T, gotPID int32, gotUID, gotGID uint32, via string, want *exec.Cmd) {
	t.Helper()
	if int(gotPID) != want.Process.Pid {
		t.Errorf("pid = %d, want the helper's %d", gotPID, want.Process.Pid)
	}
	if int(gotUID) != os.Geteuid() || int(gotGID) != os.Getegid() {
		t.Errorf("uid/gid = %d/%d, want %d/%d", gotUID, gotGID, os.Geteuid(), os.Getegid())
	}
	if via != "lookup" {
		t.Errorf("via = %q, want lookup", via)
	}
}

func TestLookupTCPFindsTheConnectingProcess(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "tcp6" {
				addr = "[::1]:0"
			}
			ln, err := net.Listen(network, addr)
			if err != nil {
				t.Skipf("no %s loopback here: %v", network, err)
			}
			defer ln.Close()
			child := startHelper(t, "tcp", ln.Addr().String())
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p, err := LookupTCP(c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr), generous)
			if err != nil {
				t.Fatalf("LookupTCP: %v", err)
			}
			if !p.HasCreds || p.Addr != c.RemoteAddr().String() {
				t.Errorf("peer = %+v, want creds and addr %s", p, c.RemoteAddr())
			}
			checkPeer(t, p.PID, p.UID, p.GID, p.Via, child)
		})
	}
}

func TestLookupTCPNoSuchPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Port 1 on loopback: no socket of ours talks from there.
	p, err := LookupTCP(ln.Addr().(*net.TCPAddr), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, generous)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if p.HasCreds || p.Addr != "127.0.0.1:1" {
		t.Errorf("peer = %+v, want only the address", p)
	}
}

func TestLookupStopsAtBudget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	startHelper(t, "tcp", ln.Addr().String())
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The helper's socket is never among the first fd of any process
	// (0-2 are stdio), so one fd is always too few.
	_, err = LookupTCP(c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr), Budget{MaxFDs: 1})
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("err = %v, want ErrBudget", err)
	}
}

func TestLookupUDPFindsTheSender(t *testing.T) {
	for _, mode := range []string{"udp", "udpu"} {
		t.Run(mode, func(t *testing.T) {
			ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			child := startHelper(t, mode, ln.LocalAddr().String())
			buf := make([]byte, 64)
			ln.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, src, err := ln.ReadFromUDP(buf)
			if err != nil {
				t.Fatal(err)
			}
			local := ln.LocalAddr().(*net.UDPAddr)
			p, err := LookupUDP(local, src, generous)
			if err != nil {
				t.Fatalf("LookupUDP: %v", err)
			}
			checkPeer(t, p.PID, p.UID, p.GID, p.Via, child)

			cache := NewUDPCache(time.Minute, generous, 0)
			defer cache.Close()
			for i := 0; i < 3; i++ {
				q := cache.Lookup(local.AddrPort(), src.AddrPort(), time.Now())
				checkPeer(t, q.PID, q.UID, q.GID, q.Via, child)
			}
			if cache.Len() != 1 {
				t.Errorf("cache holds %d entries, want 1", cache.Len())
			}
		})
	}
}

// A cached sender is named only for datagrams read before a confirmation
// that found its socket still bound: once it closed, datagrams read later
// name nobody. Entries expire after the TTL (the process is looked for
// again) and the socket is confirmed once per batch, not per datagram.
func TestUDPCacheConfirmsAndExpires(t *testing.T) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	local := ln.LocalAddr().(*net.UDPAddr).AddrPort()
	s, err := net.DialUDP("udp", nil, ln.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	src := s.LocalAddr().(*net.UDPAddr).AddrPort()
	now := time.Now()
	c := NewUDPCache(time.Second, generous, 0)
	defer c.Close()
	c.now = func() time.Time { return now }
	batch1 := now.Add(-time.Millisecond)
	if p := c.Lookup(local, src, batch1); !p.HasCreds || int(p.PID) != os.Getpid() {
		t.Fatalf("open sender: %+v, want our pid %d", p, os.Getpid())
	}
	// After the TTL the process is looked for again; the socket is the same.
	now = now.Add(2 * time.Second)
	if p := c.Lookup(local, src, now.Add(-time.Millisecond)); !p.HasCreds || int(p.PID) != os.Getpid() {
		t.Fatalf("after the TTL: %+v, want our pid again", p)
	}
	confirmed := now
	s.Close()
	// The rest of a batch read before the last confirmation: no request.
	if p := c.Lookup(local, src, confirmed.Add(-time.Millisecond)); !p.HasCreds {
		t.Fatalf("datagram read before the confirmation: %+v, want the confirmed sender", p)
	}
	// A batch read after the sender closed names nobody.
	now = now.Add(time.Millisecond)
	if p := c.Lookup(local, src, now); p.HasCreds || p.Addr != src.String() {
		t.Fatalf("after the sender closed: %+v, want the address only", p)
	}
}

// A source port that changes hands is never attributed to its previous
// socket: the batch in which the change is seen names nobody (either socket
// may have sent it), the batches after name the new socket's process.
func TestUDPCacheSocketChangedHands(t *testing.T) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	local := ln.LocalAddr().(*net.UDPAddr).AddrPort()
	a, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	src := a.LocalAddr().(*net.UDPAddr).AddrPort()
	c := NewUDPCache(time.Hour, generous, 0)
	defer c.Close()
	if p := c.Lookup(local, src, time.Now()); !p.HasCreds {
		t.Fatalf("first socket: %+v", p)
	}
	a.Close()
	b, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(src))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if p := c.Lookup(local, src, time.Now()); p.HasCreds {
		t.Fatalf("batch in which the port changed hands: %+v, want no identity", p)
	}
	if p := c.Lookup(local, src, time.Now()); !p.HasCreds || int(p.PID) != os.Getpid() {
		t.Fatalf("next batch: %+v, want the new socket's process", p)
	}
}

func TestFIFOWriters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// Hold it the way the fifo listener does (O_RDWR): we are a writer
	// too, but FIFOWriters excludes its own process.
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	if ws, err := FIFOWriters(path, generous); err != nil || len(ws) != 0 {
		t.Fatalf("no writer yet: got %+v, %v", ws, err)
	}
	w := startHelper(t, "fifow", path)
	startHelper(t, "fifor", path) // a reader is not a writer
	ws, err := FIFOWriters(path, generous)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 {
		t.Fatalf("writers = %+v, want exactly the writer helper %d", ws, w.Process.Pid)
	}
	checkPeer(t, ws[0].PID, ws[0].UID, ws[0].GID, ws[0].Via, w)
}

func TestFIFOWritersNotAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "regular")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := FIFOWriters(p, generous); err == nil {
		t.Fatal("a regular file was accepted as a FIFO")
	}
}

// BenchmarkLookupTCP is one accept-time lookup over a real loopback
// connection whose peer is this process (found early thanks to the hints,
// the common case of a producer that reconnects).
func BenchmarkLookupTCP(b *testing.B) { benchLookupTCP(b, func() {}) }

// BenchmarkLookupTCPHintedPid is a lookup whose peer is a hinted pid but
// far from the fd it used last: its fd directory is read before /proc is
// listed.
func BenchmarkLookupTCPHintedPid(b *testing.B) {
	benchLookupTCP(b, func() {
		hints.Lock()
		hints.pids = []int32{int32(os.Getpid())}
		hints.lastFD = map[int32]int{int32(os.Getpid()): 1 << 20} // the probe's window misses
		hints.Unlock()
	})
}

// BenchmarkLookupTCPCold is the same without hints: the walk starts at the
// highest pid.
func BenchmarkLookupTCPCold(b *testing.B) {
	benchLookupTCP(b, func() {
		hints.Lock()
		hints.pids = nil
		hints.Unlock()
	})
}

// benchLookupTCP times LookupTCP over a loopback connection to this
// process, with prepare run before each lookup (to set the hints up).
func benchLookupTCP(b *testing.B, prepare func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	srv, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	l, r := srv.LocalAddr().(*net.TCPAddr), srv.RemoteAddr().(*net.TCPAddr)
	b.ReportAllocs()
	for b.Loop() {
		prepare()
		resetShare()
		if _, err := LookupTCP(l, r, Budget{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProcWalkFull is the worst case: every fd of every process is
// read and none matches (a lookup that ends in ErrNotFound after the walk).
func BenchmarkProcWalkFull(b *testing.B) {
	b.ReportAllocs()
	var fds int
	for b.Loop() {
		_, _, n, err := scan(Budget{}, nil, self, false, func(int32, []byte, []byte) bool { return false })
		if !errors.Is(err, ErrNotFound) {
			b.Fatal(err)
		}
		fds = n
	}
	b.ReportMetric(float64(fds), "fds/walk")
}

// BenchmarkSockDiag is the netlink part alone.
func BenchmarkSockDiag(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	la, ra := cli.LocalAddr().(*net.TCPAddr).AddrPort(), cli.RemoteAddr().(*net.TCPAddr).AddrPort()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := diagLookup(unix.IPPROTO_TCP, la, ra); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUDPCacheHit is the per-datagram cost a UDP listener pays for a
// sender already confirmed in the batch.
func BenchmarkUDPCacheHit(b *testing.B) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	s, err := net.DialUDP("udp", nil, ln.LocalAddr().(*net.UDPAddr))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := NewUDPCache(time.Hour, Budget{}, 0)
	defer c.Close()
	l, r := ln.LocalAddr().(*net.UDPAddr).AddrPort(), s.LocalAddr().(*net.UDPAddr).AddrPort()
	readAt := time.Now()
	if p := c.Lookup(l, r, readAt); !p.HasCreds {
		b.Fatalf("sender not found: %+v", p)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Lookup(l, r, readAt)
	}
}

// BenchmarkUDPCacheConfirm is what a UDP listener pays once per batch per
// loopback sender: one sock_diag request on the cache's kept socket.
func BenchmarkUDPCacheConfirm(b *testing.B) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	s, err := net.DialUDP("udp", nil, ln.LocalAddr().(*net.UDPAddr))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := NewUDPCache(time.Hour, Budget{}, 0)
	defer c.Close()
	l, r := ln.LocalAddr().(*net.UDPAddr).AddrPort(), s.LocalAddr().(*net.UDPAddr).AddrPort()
	if p := c.Lookup(l, r, time.Now()); !p.HasCreds {
		b.Fatalf("sender not found: %+v", p)
	}
	b.ReportAllocs()
	for b.Loop() {
		resetShare() // measure the request, not the CPU share that caps it
		if p := c.Lookup(l, r, time.Now()); !p.HasCreds {
			b.Fatalf("sender lost: %+v", p)
		}
	}
}

// resetShare forgets the lookups' CPU spent this second, so benchmarks
// measure lookups instead of running into lookupShare.
func resetShare() {
	spent.Lock()
	spent.used = 0
	spent.Unlock()
}

// Lookups stop once they used their CPU share of the second: the storm's
// later peers are known by address only (ErrRate), until the next second.
func TestLookupShare(t *testing.T) {
	spent.Lock()
	spent.second, spent.used = time.Now().Unix(), lookupShare
	spent.Unlock()
	defer func() {
		spent.Lock()
		spent.used = 0
		spent.Unlock()
	}()
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	p, err := LookupTCP(local, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}, DefaultBudget)
	if !errors.Is(err, ErrRate) || p.HasCreds || p.Addr != "127.0.0.1:2" {
		t.Fatalf("lookup over the share: %+v, %v; want the address only and ErrRate", p, err)
	}
}

// The probe finds a hinted process's new socket at, above and below the fd
// its last socket had (a client whose pool closed connections gets lower
// numbers back), and only within probeSpan of it.
func TestProbeLooksAroundTheLastFD(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// The socket moved to fd 200 alone, so no other number names it.
	const fd = 200
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup3(int(f.Fd()), fd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	f.Close()
	c.Close()
	defer unix.Close(fd)
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		hints.Lock()
		hints.pids, hints.lastFD = nil, nil
		hints.Unlock()
	}()
	for _, tc := range []struct {
		last int
		find bool
	}{{fd, true}, {fd - 3, true}, {fd + 5, true}, {fd + probeSpan, true}, {fd - probeSpan - 1, false}, {fd + probeSpan + 1, false}} {
		hints.Lock()
		hints.pids, hints.lastFD = []int32{self}, map[int32]int{self: tc.last}
		hints.Unlock()
		pid, got, ok := probe([]byte(target))
		if ok != tc.find || (ok && (pid != self || got != fd)) {
			t.Errorf("socket at fd %d, last fd %d: probe found pid %d fd %d (%v), want found=%v", fd, tc.last, pid, got, ok, tc.find)
		}
	}
}

// readCreds gives the effective ids, those SO_PEERCRED reports, of a
// process that is not dumpable (its euid differs from its real uid), whose
// files under /proc/PID belong to root.
func TestReadCredsOfAProcessThatIsNotDumpable(t *testing.T) {
	testenv.RequireRoot(t)
	h := startHelper(t, "setuid", "")
	pid := h.Process.Pid
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/fd", pid), &st); err != nil || st.Uid != 0 {
		t.Fatalf("the helper should not be dumpable: /proc/%d/fd owned by %d (%v)", pid, st.Uid, err)
	}
	uid, gid, err := readCreds(int32(pid))
	if err != nil || uid != 65534 || gid != 65534 {
		t.Fatalf("readCreds(%d) = %d/%d, %v; want the effective ids 65534/65534", pid, uid, gid, err)
	}
	if _, _, err := readCreds(1 << 30); err == nil {
		t.Error("readCreds of a pid that does not exist: no error")
	}
}
