package mqueue

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/testenv"
)

func TestRoundTripAttrUnlink(t *testing.T) {
	lim, err := ReadLimits()
	if err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("no POSIX mqueue: %v", err))
	}
	if lim.MsgMax <= 0 || lim.MsgSizeMax <= 0 {
		t.Fatalf("limits %+v", lim)
	}
	name := fmt.Sprintf("/logagg-mqueue-test-%d", os.Getpid())
	r, err := Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_NONBLOCK, 0o600, &Attr{MaxMsg: 2, MsgSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer Unlink(name)
	w, err := Open(name[1:], unix.O_WRONLY, 0, nil) // the leading '/' is optional
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, m := range []string{"one", "two"} {
		if err := w.Send([]byte(m), 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	// Full: a timed send gives up; an oversized one is refused.
	if err := w.Send([]byte("three"), 0, 20*time.Millisecond); !errors.Is(err, unix.ETIMEDOUT) {
		t.Fatalf("send to full queue: %v, want ETIMEDOUT", err)
	}
	a, err := r.Attr()
	if err != nil || a.CurMsgs != 2 || a.MaxMsg != 2 || a.MsgSize != 64 || a.Flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("attr %+v %v", a, err)
	}
	buf := make([]byte, 64)
	for _, want := range []string{"one", "two"} {
		n, err := r.Receive(buf, -1)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("receive %q %v, want %q", buf[:n], err, want)
		}
	}
	if _, err := ReceiveFD(r.FD(), buf); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("empty non-blocking receive: %v, want EAGAIN", err)
	}
	if err := w.Send(make([]byte, 65), 0, -1); !errors.Is(err, unix.EMSGSIZE) {
		t.Fatalf("oversized send: %v, want EMSGSIZE", err)
	}
	if err := Unlink(name); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(name, unix.O_WRONLY, 0, nil); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("open after unlink: %v, want ENOENT", err)
	}
	for _, bad := range []string{"", "/", "/a/b", "x\x00y"} {
		if _, err := Open(bad, unix.O_RDONLY, 0, nil); !errors.Is(err, ErrBadName) {
			t.Errorf("Open(%q): %v, want ErrBadName", bad, err)
		}
	}
}
