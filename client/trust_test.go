package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	_ "github.com/ipclab/logagg/internal/transport/fifo"
	"github.com/ipclab/logagg/internal/transport/transporttest"
	_ "github.com/ipclab/logagg/internal/transport/unixgram"
	_ "github.com/ipclab/logagg/internal/transport/unixstream"
)

// The test binary doubles as a listener run by another user (helper
// process): LOGAGG_CLIENT_LISTEN=path makes it listen on a unix socket
// there, say "ready", and copy what it receives to stdout.
func TestMain(m *testing.M) {
	if path := os.Getenv("LOGAGG_CLIENT_LISTEN"); path != "" {
		os.Exit(listenAndEcho(path))
	}
	os.Exit(m.Run())
}

func listenAndEcho(path string) int {
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		go io.Copy(os.Stdout, c)
	}
}

// A socket, FIFO or queue at the address that belongs to another user is
// refused before anything is written to it, naming its owner; trusted
// with WithAggregatorUID, the same address is written to. (The address is
// the aggregator's own, given to nobody: what a user who created it first
// would have.)
func TestAnotherUsersAddressRefused(t *testing.T) {
	testenv.RequireRoot(t)
	dir := tempDir(t)
	queue := fmt.Sprintf("/logagg-client-trust-%d", os.Getpid())
	t.Cleanup(func() { mqueue.Unlink(queue) })
	for _, tc := range []struct {
		name, raw string
		chown     func(t *testing.T)
	}{
		{"unix", "unix://" + filepath.Join(dir, "u.sock"), chownPath(filepath.Join(dir, "u.sock"))},
		{"unixgram", "unixgram://" + filepath.Join(dir, "g.sock"), chownPath(filepath.Join(dir, "g.sock"))},
		{"fifo", "fifo://" + filepath.Join(dir, "f.fifo"), chownPath(filepath.Join(dir, "f.fifo"))},
		{"shm", "shm://" + filepath.Join(dir, "s.sock"), chownPath(filepath.Join(dir, "s.sock"))},
		{"mq", "mq://" + queue, func(t *testing.T) {
			q, err := mqueue.Open(queue, unix.O_RDONLY, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if err := unix.Fchown(q.FD(), testenv.Nobody, testenv.Nobody); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := transporttest.NewCapture()
			l, err := transport.Open(tc.raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(c, sink.Options{}), Opts: transport.DefaultOptions()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			defer func() {
				cancel()
				<-done
			}()
			tc.chown(t)

			w, err := Dial(tc.raw)
			if err == nil {
				w.Log("INFO", "to another user's address")
				w.Close()
				t.Fatalf("Dial wrote to an address of nobody's")
			}
			if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "nobody") {
				t.Errorf("Dial: %v, want ErrUntrusted naming the owner", err)
			}
			t.Logf("refused: %v", err)

			w, err = Dial(tc.raw, WithAggregatorUID(testenv.Nobody))
			if err != nil {
				t.Fatalf("Dial trusting nobody: %v", err)
			}
			if err := w.Log("INFO", "trusted"); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "the trusted record", func() bool { return c.Len() >= 1 })
			recs, err := c.Records()
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].Message != "trusted" {
				t.Errorf("records %+v, want only the trusted one", recs)
			}
		})
	}
}

func chownPath(p string) func(t *testing.T) {
	return func(t *testing.T) {
		if err := os.Lchown(p, testenv.Nobody, testenv.Nobody); err != nil {
			t.Fatal(err)
		}
	}
}

// A unix socket whose file is root's but which another user's process
// serves (it bound it, then the file changed hands) is refused: the
// kernel's peer credentials say whose process it is, whatever the file
// says.
func TestAnotherUsersListenerRefused(t *testing.T) {
	nobody := testenv.AsNobody(t)
	dir := tempDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "l.sock")
	cmd := nobody.Command("LOGAGG_CLIENT_LISTEN=" + path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("helper: %q", lines.Text())
	}
	if err := os.Lchown(path, 0, 0); err != nil {
		t.Fatal(err)
	}
	w, err := Dial("unix://" + path)
	if err == nil {
		w.Log("INFO", "to another user's process")
		w.Close()
		t.Fatal("Dial wrote to a socket nobody's process serves")
	}
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "nobody") {
		t.Errorf("Dial: %v, want ErrUntrusted naming the user", err)
	}
	t.Logf("refused: %v", err)
	w, err = Dial("unix://"+path, WithAggregatorUID(testenv.Nobody), WithFormat(FormatRaw))
	if err != nil {
		t.Fatalf("Dial trusting nobody: %v", err)
	}
	w.Log("INFO", "trusted")
	w.Close()
	if !lines.Scan() || lines.Text() != "trusted" {
		t.Errorf("the helper received %q first, want only the trusted record", lines.Text())
	}
}

func TestParseUsers(t *testing.T) {
	got, err := ParseUsers("root, 65534,")
	if err != nil || len(got) != 2 || got[0] != 0 || got[1] != 65534 {
		t.Errorf("ParseUsers: %v %v", got, err)
	}
	if _, err := ParseUsers("no-such-user-here"); err == nil {
		t.Error("ParseUsers accepted an unknown user")
	}
}
