package rawchan

import (
	"bufio"
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func startSh(t *testing.T, script string, files []*os.File, onExit func()) *Child {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := ChildSpec{Exe: "/bin/sh", Args: []string{"-c", script}, Files: files, ReadStdout: true, OnExit: onExit}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

// The child's end of the channel is open only in the child: when it exits
// the measuring side reads EOF instead of waiting for ever, and OnExit has
// run by the time Wait returns.
func TestChildDeathIsSeenOnTheChannel(t *testing.T) {
	parent, childFd, _, err := Dial(UnixStream)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	var exited atomic.Bool
	c := startSh(t, "read x <&3; exit 3", []*os.File{os.NewFile(uintptr(childFd), "child")}, func() { exited.Store(true) })
	if _, err := unix.Write(parent, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Wait: %v, want exit status 3", err)
	}
	if !exited.Load() {
		t.Fatal("OnExit had not run when Wait returned")
	}
	fds := []unix.PollFd{{Fd: int32(parent), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 5000); err != nil || n != 1 {
		t.Fatalf("parent end not readable after the child died (poll %d, %v): a copy of the child's end is still open", n, err)
	}
	if n, err := unix.Read(parent, make([]byte, 8)); n != 0 || err != nil {
		t.Fatalf("read after the child died: %d, %v; want EOF", n, err)
	}
}

// Fail kills the child and quotes what it said on stderr and how it
// ended, beside the measuring side's error.
func TestChildFailQuotesItsStderr(t *testing.T) {
	c := startSh(t, "echo 'mq_open: permission denied' >&2; echo ready; exec sleep 60", nil, nil)
	line, err := bufio.NewReader(c.Stdout()).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("readiness line %q, %v", line, err)
	}
	err = c.Fail(os.ErrDeadlineExceeded)
	for _, want := range []string{"i/o timeout", "mq_open: permission denied", "signal: killed"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Fail: %v, want it to say %q", err, want)
		}
	}
	select {
	case <-c.Done():
	default:
		t.Error("Fail returned before the child was reaped")
	}
}
