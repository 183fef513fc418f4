package systemd

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestNotifyPathAndAbstract(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify.sock"),
		"@logagg-notify-test-" + strconv.Itoa(os.Getpid()),
	} {
		t.Run(name, func(t *testing.T) {
			srv, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			t.Setenv("NOTIFY_SOCKET", name)
			n, err := NewNotifier()
			if err != nil || n == nil {
				t.Fatalf("NewNotifier: %v, %v", n, err)
			}
			defer n.Close()
			if err := n.Notify("READY=1", "STATUS=up"); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 256)
			srv.SetReadDeadline(time.Now().Add(5 * time.Second))
			k, _, err := srv.ReadFromUnix(buf)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(buf[:k]); got != "READY=1\nSTATUS=up" {
				t.Fatalf("got %q", got)
			}
		})
	}
}

func TestNoNotifySocketIsANoOp(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n, err := NewNotifier()
	if n != nil || err != nil {
		t.Fatalf("NewNotifier without NOTIFY_SOCKET = %v, %v", n, err)
	}
	if err := n.Notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", "relative/path")
	if _, err := NewNotifier(); err == nil {
		t.Fatal("a relative NOTIFY_SOCKET was accepted")
	}
}

func TestWatchdogInterval(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
		err       bool
	}{
		{"", "", 0, false},
		{"30000000", "", 15 * time.Second, false},
		{"30000000", me, 15 * time.Second, false},
		{"30000000", "1", 0, false}, // meant for another process
		{"0", "", 0, true},
		{"x", "", 0, true},
	} {
		t.Setenv("WATCHDOG_USEC", c.usec)
		t.Setenv("WATCHDOG_PID", c.pid)
		got, err := WatchdogInterval()
		if got != c.want || (err != nil) != c.err {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, %v; want %v, error %v", c.usec, c.pid, got, err, c.want, c.err)
		}
	}
}

func TestListenFilesIgnoresOtherPID(t *testing.T) {
	t.Setenv("LISTEN_PID", "1")
	t.Setenv("LISTEN_FDS", "2")
	t.Setenv("LISTEN_FDNAMES", "a:b")
	files, err := ListenFiles()
	if err != nil || len(files) != 0 {
		t.Fatalf("ListenFiles for pid 1 = %v, %v; want none", files, err)
	}
	if os.Getenv("LISTEN_FDS") != "" {
		t.Fatal("LISTEN_FDS left set")
	}
}
