package all_test

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/capture"
	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/shmring"
	"github.com/ipclab/logagg/internal/transport/mq"
	"github.com/ipclab/logagg/internal/transport/otlp/otlptest"
	"github.com/ipclab/logagg/internal/transport/shm"
	"github.com/ipclab/logagg/internal/transport/stdin"

	"github.com/ipclab/logagg/internal/transport"
	_ "github.com/ipclab/logagg/internal/transport/all"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// tempPath returns a fresh path in a short private directory (unix socket
// paths must stay under 108 bytes, which t.TempDir() may exceed).
func tempPath(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, name)
}

func pathOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	return transport.PathOf(u)
}

// cases is the one table of every transport. Each entry says how to make a
// fresh address and a sender for it, and what the transport can promise.
var cases = []transporttest.Case{
	{
		Name:      "unix",
		Transport: "unix",
		NewURL:    func(t testing.TB) string { return "unix://" + tempPath(t, "s.sock") },
		Dial: func(raw string) (io.WriteCloser, error) {
			p, err := pathOf(raw)
			if err != nil {
				return nil, err
			}
			return net.Dial("unix", p)
		},
		Stream: true, Creds: true, PathBased: true, Exclusive: true, Conns: true,
	},
	{
		Name:      "tcp",
		Transport: "tcp",
		NewURL:    func(testing.TB) string { return "tcp://127.0.0.1:0" },
		Dial: func(raw string) (io.WriteCloser, error) {
			return net.Dial("tcp", strings.TrimPrefix(raw, "tcp://"))
		},
		Stream: true, PeerAddr: true, Conns: true,
	},
	{
		Name:      "fifo",
		Transport: "fifo",
		NewURL:    func(t testing.TB) string { return "fifo://" + tempPath(t, "f.fifo") },
		Dial: func(raw string) (io.WriteCloser, error) {
			p, err := pathOf(raw)
			if err != nil {
				return nil, err
			}
			return os.OpenFile(p, os.O_WRONLY, 0)
		},
		Stream: true, PathBased: true, Exclusive: true,
	},
	{
		Name:      "unixgram",
		Transport: "unixgram",
		NewURL:    func(t testing.TB) string { return "unixgram://" + tempPath(t, "d.sock") },
		Dial: func(raw string) (io.WriteCloser, error) {
			return net.Dial("unixgram", strings.TrimPrefix(raw, "unixgram://"))
		},
		// A blocking unix datagram sender blocks on a full queue
		// (max_dgram_qlen), so nothing is lost, but the receiver cannot
		// hold it back beyond that queue: no Stream backpressure promise.
		Creds: true, PathBased: true, Messages: true, CutByKernel: true, Exclusive: true,
	},
	{
		Name:      "udp",
		Transport: "udp",
		NewURL:    func(testing.TB) string { return "udp://127.0.0.1:0" },
		Dial: func(raw string) (io.WriteCloser, error) {
			return net.Dial("udp", strings.TrimPrefix(raw, "udp://"))
		},
		PeerAddr: true, Lossy: true, Messages: true, CutByKernel: true,
	},
	{
		Name:      "shm",
		Transport: "shm",
		NewURL:    func(t testing.TB) string { return "shm://" + tempPath(t, "c.sock") + "?size=256KiB" },
		Dial: func(raw string) (io.WriteCloser, error) {
			u, err := url.Parse(raw)
			if err != nil {
				return nil, err
			}
			path, _, err := shm.ParseURL(u)
			if err != nil {
				return nil, err
			}
			w, err := shmring.Dial(path)
			if err != nil {
				return nil, err
			}
			return ringConn{w}, nil
		},
		Stream: true, Creds: true, PathBased: true, Messages: true, Exclusive: true, Conns: true, // a full ring blocks the writer
		KeepsUnread: true, // frames not yet written stay in the ring for the next aggregator
	},
	{
		Name:      "mq",
		Transport: "mq",
		NewURL: func(t testing.TB) string {
			name := fmt.Sprintf("/logagg-conf-%d-%d", os.Getpid(), mqSeq.Add(1))
			t.Cleanup(func() { mqueue.Unlink(name) })
			// The suite sets --max-record to 64 KiB, more than this
			// kernel's msgsize_max (8192) allows: ask for what it allows.
			return "mq://" + name + "?msgsize=8192"
		},
		Dial: func(raw string) (io.WriteCloser, error) {
			u, err := url.Parse(raw)
			if err != nil {
				return nil, err
			}
			name, err := mq.Name(u)
			if err != nil {
				return nil, err
			}
			q, err := mqueue.Open(name, unix.O_WRONLY, 0, nil)
			if err != nil {
				return nil, err
			}
			return queueConn{q}, nil
		},
		Stat: func(t testing.TB, raw string) unix.Stat_t {
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			name, err := mq.Name(u)
			if err != nil {
				t.Fatal(err)
			}
			q, err := mqueue.Open(name, unix.O_RDONLY|unix.O_NONBLOCK, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			var st unix.Stat_t
			if err := unix.Fstat(q.FD(), &st); err != nil {
				t.Fatal(err)
			}
			return st
		},
		Stream: true, Messages: true, Exclusive: true, // senders block on a full queue
	},
}

// Single-source transports: the sender of the listener the suite just
// opened. Subtests run one after another, so one variable serves.
var (
	stdinWriter *os.File
	execWriter  *os.File
	execChild   *capture.Child
)

func init() {
	cases = append(cases,
		transporttest.Case{
			Name:      "stdin",
			Transport: "stdin",
			NewURL:    func(testing.TB) string { return "stdin://" },
			// The listener reads a pipe the test owns instead of the
			// process's real stdin.
			Open: func(raw string, d transport.Deps) (transport.Listener, error) {
				r, w, err := os.Pipe()
				if err != nil {
					return nil, err
				}
				stdinWriter = w
				d.Metrics = d.Root.ForListener(raw)
				return stdin.NewFile(r, d)
			},
			Dial:   func(string) (io.WriteCloser, error) { return stdinWriter, nil },
			Stream: true, Single: true,
		},
		transporttest.Case{
			Name:      "exec",
			Transport: "exec",
			// The child is cat: what the test writes to its stdin comes
			// back on its stdout, which the aggregator captures.
			NewURL: func(t testing.TB) string {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				child, err := capture.New(capture.Command{Argv: []string{"cat"}, Stdin: r})
				if err != nil {
					t.Fatal(err)
				}
				// r stays open until the end: the child starts only
				// when the listener runs.
				execWriter, execChild = w, child
				t.Cleanup(func() { w.Close(); child.Close(); r.Close() })
				return child.URL()
			},
			// As the daemon does with a source: the child is bound, not
			// opened by URL.
			Open: func(raw string, d transport.Deps) (transport.Listener, error) {
				d.Metrics = d.Root.ForListener(raw)
				return execChild, execChild.Bind(d)
			},
			Dial:    func(string) (io.WriteCloser, error) { return execWriter, nil },
			Stream:  true,
			Single:  true,
			NoDrain: "a stopped child is sent SIGTERM; what it had not yet read from its own input is its to lose",
		})
}

var fileSeq atomic.Int64

// fileCase is the file input: every Dial is a new file in the glob's
// directory, and each Write appends one line to it.
var fileCase = transporttest.Case{
	Name:      "file",
	Transport: "file",
	NewURL: func(t testing.TB) string {
		return "file://" + filepath.Dir(tempPath(t, "x")) + "/*.log?from=start"
	},
	Dial: func(raw string) (io.WriteCloser, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(filepath.Dir(u.Path), fmt.Sprintf("f%d.log", fileSeq.Add(1)))
		return os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	},
	// A NUL does not end a line of a file: a line is one record whatever
	// bytes it holds, as a message is.
	Messages: true,
	// A file keeps what was not read, for the next start (the checkpoint):
	// there is neither a drain nor anything to give up at a hard stop.
	NoDrain: "a file keeps what was not read; the next start reads it from the checkpoint",
	// Not Exclusive: the lock is the checkpoint's, so per state directory
	// (the suite opens its second instance without one; the file
	// package tests the lock).
	// The checkpoint goes beside the files (the glob does not match it),
	// not into the working directory.
	Open: func(raw string, d transport.Deps) (transport.Listener, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		d.StateDir = filepath.Dir(u.Path)
		return transport.Open(raw, d)
	},
}

func init() { cases = append(cases, fileCase) }

// otlpSkips are the subtests that do not apply to the OTLP receivers: a
// request/response protocol refuses what a byte stream keeps and flags,
// and a record's payload is the JSON object rendered from the protobuf,
// not the bytes sent. Package otlp tests each of these its own way.
var otlpSkips = map[string]string{
	"oversized": "a record over max_record is rejected by partial success, not cut into pieces (TestBadInput in package otlp)",
	"bad_input": "OTLP strings must be UTF-8: the request is refused with INVALID_ARGUMENT/400, not kept flagged (TestBadInput in package otlp)",
	"hard_stop": "dropped bytes count the rendered JSON payloads, not the bytes sent (TestHardStop in package otlp)",
	"fds_short_waits": "a client that waits in the backlog has been told nothing, so it is not drained at the stop but tries again; and a gRPC client cannot write before it is accepted " +
		"(TestShortOfDescriptorsWaits in package otlp)",
}

func init() {
	dialOTLP := func(raw string) (io.WriteCloser, error) { return otlptest.Dial(raw) }
	cases = append(cases,
		transporttest.Case{Name: "otlp", Transport: "otlp", NewURL: func(testing.TB) string { return "otlp://127.0.0.1:0" },
			Dial: dialOTLP, Stream: true, Messages: true, Conns: true, PeerAddr: true, KeepsUnread: true, Skip: otlpSkips},
		transporttest.Case{Name: "otlphttp", Transport: "otlphttp", NewURL: func(testing.TB) string { return "otlphttp://127.0.0.1:0" },
			Dial: dialOTLP, Stream: true, Messages: true, Conns: true, PeerAddr: true, KeepsUnread: true, Skip: otlpSkips},
		transporttest.Case{Name: "otlp+unix", Transport: "otlp+unix", NewURL: func(t testing.TB) string { return "otlp+unix://" + tempPath(t, "o.sock") },
			Dial: dialOTLP, Stream: true, Messages: true, Conns: true, Creds: true, PathBased: true, Exclusive: true, KeepsUnread: true, Skip: otlpSkips},
		transporttest.Case{Name: "otlphttp+unix", Transport: "otlphttp+unix", NewURL: func(t testing.TB) string { return "otlphttp+unix://" + tempPath(t, "h.sock") },
			Dial: dialOTLP, Stream: true, Messages: true, Conns: true, Creds: true, PathBased: true, Exclusive: true, KeepsUnread: true, Skip: otlpSkips},
	)
}

var mqSeq atomic.Int64

type ringConn struct{ w *shmring.Writer }

func (c ringConn) Write(p []byte) (int, error) {
	if err := c.w.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}
func (c ringConn) Close() error { return c.w.Close() }

type queueConn struct{ q *mqueue.Queue }

func (c queueConn) Write(p []byte) (int, error) {
	if err := c.q.Send(p, 0, -1); err != nil {
		return 0, err
	}
	return len(p), nil
}
func (c queueConn) Close() error { return c.q.Close() }

func TestTransports(t *testing.T) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { transporttest.Run(t, c) })
	}
}

// notSenders are the registered inputs the suite cannot drive, with the
// reason and where their own tests are. The journal: a Write would have
// to become a journal entry (systemd-journal-remote, a process per
// batch), and what the suite asserts about framing does not apply to it:
// its message is one field of an entry, a value longer than the maximum
// record is cut, not split into pieces, and a NUL or newline is part of
// the value.
var notSenders = map[string]string{
	"journal": "reads journal entries, not bytes (internal/transport/journal, cmd/aggregator/journal_test.go)",
}

// TestEveryRegisteredSchemeHasACase keeps the table complete: a transport
// registered without a conformance case fails here.
func TestEveryRegisteredSchemeHasACase(t *testing.T) {
	for _, s := range transport.Schemes() {
		if notSenders[s] != "" {
			continue
		}
		if !slices.ContainsFunc(cases, func(c transporttest.Case) bool { return c.Name == s }) {
			t.Errorf("scheme %q is registered but has no conformance case", s)
		}
	}
}
