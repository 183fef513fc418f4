package rawchan

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// One table over every mechanism: a message goes each way whole, with
// raw and Go syscalls, and the peer's close is seen as ErrClosed on
// streams.
func TestDialEveryMechanism(t *testing.T) {
	for _, tc := range []struct {
		mech  string
		dgram bool
	}{{UnixStream, false}, {UnixDgram, true}, {TCP, false}, {UDP, true}} {
		for _, raw := range []bool{false, true} {
			t.Run(tc.mech, func(t *testing.T) {
				parent, child, dgram, err := Dial(tc.mech)
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(parent)
				if dgram != tc.dgram {
					t.Fatalf("dgram = %v, want %v", dgram, tc.dgram)
				}
				o := IO{Dgram: dgram, Raw: raw}
				msg := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB: more than one stream segment on some paths
				got := make([]byte, len(msg))
				if err := o.Send(parent, msg); err != nil {
					t.Fatal(err)
				}
				if err := o.Recv(child, got); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("parent to child: %v, equal %v", err, bytes.Equal(got, msg))
				}
				clear(got)
				if err := o.Send(child, msg); err != nil {
					t.Fatal(err)
				}
				if err := o.Recv(parent, got); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("child to parent: %v", err)
				}
				for _, fd := range []int{parent, child} {
					if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
						t.Errorf("fd %d not close-on-exec", fd)
					}
				}
				unix.Close(child)
				if !dgram {
					if err := o.Recv(parent, got); !errors.Is(err, ErrClosed) {
						t.Errorf("after the peer closed: %v, want ErrClosed", err)
					}
				}
			})
		}
	}
	if _, _, _, err := Dial("carrier-pigeon"); !errors.Is(err, ErrUnknownMechanism) {
		t.Errorf("unknown mechanism: %v", err)
	}
}

func TestRecvStopsAndChecksLength(t *testing.T) {
	parent, child, _, err := Dial(UnixDgram)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	defer unix.Close(child)
	if err := unix.SetNonblock(parent, true); err != nil {
		t.Fatal(err)
	}
	asked := 0
	o := IO{Dgram: true, Stop: func() bool { asked++; return asked > 2 }}
	buf := make([]byte, 8)
	// Nothing arrives: Stop is asked between 100 ms polls until it says so.
	if err := o.Recv(parent, buf); !errors.Is(err, ErrStopped) || asked != 3 {
		t.Fatalf("empty channel: %v after %d asks, want ErrStopped after 3", err, asked)
	}
	if _, err := unix.Write(child, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := o.Recv(parent, buf); !errors.Is(err, ErrShortMessage) {
		t.Errorf("3-byte datagram into 8: %v, want ErrShortMessage", err)
	}
}

// A raw, blocking receive with SO_RCVTIMEO still gives up when Stop says
// so. The runtime's preemption signal interrupts such a read every 10 ms
// (it looks like a goroutine that never yields), and an interrupted
// socket receive restarts its timeout, so it never expires: Stop must be
// asked on EINTR too, or a datagram lost at the end of a latency run
// hangs its receiver for good (it did, over UDP).
func TestRawRecvStopsWhileTheRuntimeInterruptsIt(t *testing.T) {
	parent, child, _, err := Dial(UnixDgram)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	defer unix.Close(child)
	if err := SetRecvTimeout(parent); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	o := IO{Dgram: true, Raw: true, Stop: func() bool { return time.Now().After(deadline) }}
	done := make(chan error, 1)
	go func() { done <- o.Recv(parent, make([]byte, 8)) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("empty channel: %v, want ErrStopped", err)
		}
	case <-time.After(10 * RecvTimeout):
		// The receiver is stuck in a raw syscall; the process exits with
		// the test binary.
		t.Fatalf("Recv did not return %v after Stop said so", 10*RecvTimeout)
	}
}

// The measured path allocates nothing (the figures would carry GC).
func TestSendRecvAllocateNothing(t *testing.T) {
	parent, child, _, err := Dial(UnixStream)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	defer unix.Close(child)
	o := IO{Raw: true, Stop: func() bool { return false }}
	buf := make([]byte, 64)
	if n := testing.AllocsPerRun(100, func() {
		if o.Send(parent, buf) != nil || o.Recv(child, buf) != nil {
			t.Fatal("ping failed")
		}
	}); n != 0 {
		t.Errorf("%v allocations per message", n)
	}
}

// DialTCP: Nagle off unless asked to keep it, and a proxy put between the
// ends carries the bytes, is given the accepting end's address, and is
// stopped by stop.
func TestDialTCPOptions(t *testing.T) {
	noDelay := func(fd int) int {
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, nagle := range []bool{false, true} {
		w, r, stop, err := DialTCP(TCPOptions{Nagle: nagle})
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if nagle {
			want = 0
		}
		if noDelay(w) != want || noDelay(r) != want {
			t.Errorf("Nagle %v: TCP_NODELAY %d and %d, want %d", nagle, noDelay(w), noDelay(r), want)
		}
		unix.Close(w)
		unix.Close(r)
		stop()
	}

	var upstreamSeen string
	stopped := 0
	via := func(upstream string) (string, func(), error) {
		upstreamSeen = upstream
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		go func() {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", upstream)
			if err != nil {
				in.Close()
				return
			}
			go func() { io.Copy(out, in); out.Close() }()
			io.Copy(in, out)
			in.Close()
		}()
		return ln.Addr().String(), func() { stopped++; ln.Close() }, nil
	}
	w, r, stop, err := DialTCP(TCPOptions{Nagle: true, Via: via})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := "127.0.0.1:" + strconv.Itoa(sa.(*unix.SockaddrInet4).Port); upstreamSeen != want {
		t.Errorf("the proxy was given %q, want the accepting end's address %q", upstreamSeen, want)
	}
	msg := []byte("through the proxy\n")
	if err := (IO{}).Send(w, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if err := (IO{}).Recv(r, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read %q, %v; want %q", got, err, msg)
	}
	unix.Close(w)
	unix.Close(r)
	stop()
	if stopped != 1 {
		t.Errorf("proxy stopped %d times, want 1", stopped)
	}

	broken := errors.New("no proxy today")
	if _, _, _, err := DialTCP(TCPOptions{Via: func(string) (string, func(), error) { return "", nil, broken }}); !errors.Is(err, broken) {
		t.Errorf("a failing proxy: %v, want its error", err)
	}
}
