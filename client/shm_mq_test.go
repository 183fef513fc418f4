package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ipclab/logagg/internal/sink"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/shmring"
	"github.com/ipclab/logagg/internal/testenv"
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
			l, err := transport.Open(tc.raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(c, sink.Options{}), Opts: transport.DefaultOptions()})
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
			conn, maxMsg, err := dial(u, defaultTrusted())
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
			testenv.Until(30*time.Second, func() (struct{}, bool) { return struct{}{}, c.Len() >= 100 })
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

// An aggregator that read a producer's frames but never wrote them (its
// output stalled, then it went away) releases nothing; the Writer, with
// WithReconnect, offers a new aggregator on the same path every frame the
// first one did not release, and Close returns once the new one released
// all: every record arrives, duplicates allowed.
func TestSHMNewAggregatorTakesOverUnreleasedFrames(t *testing.T) {
	dir := tempDir(t)
	raw := "shm://" + filepath.Join(dir, "r.sock") + "?size=64KiB"
	start := func(c *transporttest.Capture) (stop func()) {
		hard, hardStop := context.WithCancel(context.Background())
		l, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(c, sink.Options{HardStop: hard, BatchBytes: 4096}), Opts: transport.DefaultOptions()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		return func() {
			cancel()
			hardStop()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	first := transporttest.NewCapture()
	first.Block() // read, never written
	stop1 := start(first)
	w, err := Dial(raw, WithReconnect(5*time.Millisecond, 50*time.Millisecond), WithSeq("p"), WithReconnectGiveUp(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := 0; i < n/2; i++ {
		if err := w.Log("INFO", "before"); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "a blocked Submit", func() bool { return first.Waiting() > 0 })
	stop1() // the hard stop: what it read is lost to it
	if first.Len() != 0 {
		t.Fatalf("the stalled aggregator kept %d records", first.Len())
	}
	second := transporttest.NewCapture()
	stop2 := start(second)
	defer stop2()
	for i := n / 2; i < n; i++ {
		if err := w.Log("INFO", "after"); err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if w.Delivered() != n || w.Reconnects() != 1 {
		t.Fatalf("delivered %d, reconnects %d; want %d, 1", w.Delivered(), w.Reconnects(), n)
	}
	recs, err := second.Records()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[float64]int{}
	for _, r := range recs {
		var m struct{ Seq float64 }
		json.Unmarshal(r.Raw, &m)
		seen[m.Seq]++
	}
	for seq := 1; seq <= n; seq++ {
		if seen[float64(seq)] == 0 {
			t.Fatalf("seq %d missing from the new aggregator (%d records)", seq, len(recs))
		}
	}
	t.Logf("%d records, %d duplicates", len(recs), len(recs)-n)
}
