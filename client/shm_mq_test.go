package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/shmring"
	"github.com/ipclab/logagg/internal/transport"
	_ "github.com/ipclab/logagg/internal/transport/mq"
	_ "github.com/ipclab/logagg/internal/transport/shm"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// The shm and mq dialers against the real listeners: one Write of several
// newline-terminated records arrives as those records; MaxMessage is
// honoured and a larger Write is an error, never a truncation.
func TestSHMAndMQDialers(t *testing.T) {
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	mqName := fmt.Sprintf("/logagg-client-test-%d", os.Getpid())
	defer mqueue.Unlink(mqName) // the listener unlinks it too; this covers a failed test
	for _, tc := range []struct {
		raw     string
		tooBig  error
		maxWant int
	}{
		{"shm://" + filepath.Join(dir, "c.sock") + "?size=64KiB", shmring.ErrTooLarge, 64<<10 - 12},
		{"mq://" + mqName + "?msgsize=4096&maxmsg=4", unix.EMSGSIZE, 4096},
	} {
		t.Run(tc.raw[:3], func(t *testing.T) {
			c := transporttest.NewCapture()
			l, err := transport.Open(tc.raw, metrics.New(nil), transport.Deps{Out: c, Opts: transport.DefaultOptions()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			u, _ := url.Parse(tc.raw)
			dial, err := lookupDialer(u.Scheme)
			if err != nil {
				t.Fatal(err)
			}
			conn, maxMsg, err := dial(u)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if maxMsg != tc.maxWant {
				t.Errorf("MaxMessage %d, want %d", maxMsg, tc.maxWant)
			}
			for i := 0; i < 50; i++ { // more than a 4-message queue holds: the sender waits
				if _, err := fmt.Fprintf(conn, "\x1ea %d\n\x1eb %d\n", i, i); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := conn.Write(make([]byte, maxMsg+1)); !errors.Is(err, tc.tooBig) {
				t.Errorf("oversized Write: %v, want %v", err, tc.tooBig)
			}
			deadline := time.Now().Add(30 * time.Second)
			for c.Len() < 100 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			recs, err := c.Records()
			if err != nil || len(recs) != 100 {
				t.Fatalf("%d records (%v), want 100", len(recs), err)
			}
			for i := 0; i < 50; i++ {
				if recs[2*i].Message != fmt.Sprintf("a %d", i) || recs[2*i+1].Message != fmt.Sprintf("b %d", i) {
					t.Fatalf("records %d,%d: %q %q", 2*i, 2*i+1, recs[2*i].Message, recs[2*i+1].Message)
				}
			}
		})
	}
}
