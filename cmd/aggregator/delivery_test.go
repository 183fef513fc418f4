package main

// Delivery that survives the aggregator's crash (issue 13 item 5): the
// aggregator is SIGKILLed again and again under load and restarted on the
// same addresses; every record a producer reports delivered must be in the
// output. Duplicates are allowed (at-least-once) and counted.

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
)

// crashTarget is one producer of a crash test: its transport name for the
// producer command, its URL and extra flags.
type crashTarget struct {
	transport, url string
	flags          []string
}

// crashProducer is a running producer of a crash test.
type crashProducer struct {
	id     string
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
}

// killRepeatedly starts the aggregator with args, starts one producer per
// target (seq-stamped, at rate records/s, count records each), sends the
// aggregator sig kills times, each time once it has written `every`
// records since its start, and restarts it at once on the same addresses
// once it has exited. It then waits for the producers, stops the last
// aggregator with SIGTERM and checks that every sequence number up to each
// producer's reported delivered count is in the output, and, with
// noDuplicates, that none is there twice.
func killRepeatedly(t *testing.T, dir string, args []string, targets func(p *aggProc) []crashTarget, sig syscall.Signal, noDuplicates bool, rate, count, kills, every int) {
	t.Helper()
	p := startAgg(t, dir, args...)
	var prods []*crashProducer
	for i, tg := range targets(p) {
		pr := &crashProducer{id: "crash-" + strconv.Itoa(i), done: make(chan error, 1)}
		a := append([]string{tg.transport, "120", "--addr", tg.url, "--rate", strconv.Itoa(rate),
			"--count", strconv.Itoa(count), "--seq", "--id", pr.id, "--json-summary"}, tg.flags...)
		pr.cmd = exec.Command(testenv.Binary(t, "producer"), a...)
		pr.cmd.Stderr = &pr.stderr
		if err := pr.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { pr.done <- pr.cmd.Wait() }()
		t.Cleanup(func() { pr.cmd.Process.Kill() })
		prods = append(prods, pr)
	}
	// A producer's first dial is not retried: kill only once all are in.
	if got := p.waitMetric(float64(len(prods)), "logagg_connections_accepted_total"); got < float64(len(prods)) {
		t.Fatalf("only %.0f of %d producers connected\n%s", got, len(prods), p.log())
	}
	for k := 0; k < kills; k++ {
		if got := p.waitMetric(float64(every), "logagg_records_out_total"); got < float64(every) {
			t.Fatalf("kill %d: only %.0f records written\n%s", k+1, got, p.log())
		}
		p.signal(sig)
		<-p.exited()
		p = startAgg(t, dir, args...) // the dead one's lock and socket are taken over
	}
	for _, pr := range prods {
		select {
		case err := <-pr.done:
			if err != nil {
				t.Fatalf("producer %s: %v\n%s", pr.id, err, pr.stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("producer %s did not finish\n%s", pr.id, pr.stderr.String())
		}
	}
	p.stop(syscall.SIGTERM)

	got := map[string]map[uint64]int{}
	partials := 0
	files, _ := filepath.Glob(p.output + ".*") // rotated segments, if any
	for _, name := range append(files, p.output) {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if st, ok := seqstamp.Find(sc.Bytes()); ok {
				if bytes.Contains(sc.Bytes(), []byte(`"partial"`)) {
					// The front of a record a failed write cut off, kept
					// flagged partial; the client sends the record again
					// whole. Not a second copy of the record.
					partials++
					continue
				}
				if got[st.Producer] == nil {
					got[st.Producer] = map[uint64]int{}
				}
				got[st.Producer][st.Seq]++
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d partial fronts of records cut by a failed write (kept, flagged partial)", partials)
	for _, pr := range prods {
		var s struct {
			Sent, Delivered, Failed, Reconnects int64
		}
		if err := jsonLastLine(pr.stderr.Bytes(), &s); err != nil {
			t.Fatalf("producer %s summary: %v\n%s", pr.id, err, pr.stderr.String())
		}
		if s.Delivered != int64(count) {
			t.Errorf("producer %s: delivered %d of %d (sent %d, failed %d)", pr.id, s.Delivered, count, s.Sent, s.Failed)
		}
		missing, dups := 0, 0
		for seq := uint64(1); seq <= uint64(s.Delivered); seq++ {
			switch n := got[pr.id][seq]; {
			case n == 0:
				if missing < 5 {
					t.Errorf("producer %s: seq %d reported delivered, not in the output", pr.id, seq)
				}
				missing++
			case n > 1:
				dups += n - 1
			}
		}
		t.Logf("producer %s: delivered %d, %d missing, %d duplicates, %d reconnects over %d × %v (%d distinct records in the output)",
			pr.id, s.Delivered, missing, dups, s.Reconnects, kills, sig, len(got[pr.id]))
		if missing > 0 {
			t.Errorf("producer %s: %d delivered records missing", pr.id, missing)
		}
		if noDuplicates && dups > 0 {
			t.Errorf("producer %s: %d records written twice", pr.id, dups)
		}
	}
}

// shm: the aggregator releases ring space only once the records are
// written, so what a SIGKILL interrupts is still in the producer's ring;
// the producer reconnects and offers it to the next aggregator.
func TestSIGKILLLosesNothingDeliveredSHM(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := testenv.ShortTempDir(t)
	// A small ring fills between kills: the producer notices the death
	// while writing, not only at Close.
	shm := "shm://" + filepath.Join(dir, "ring.sock") + "?size=256KiB"
	killRepeatedly(t, dir, []string{"--listen", shm, "--fsync", "batch"}, func(p *aggProc) []crashTarget {
		return []crashTarget{{"shm", p.url("shm"), nil}, {"shm", p.url("shm"), []string{"--buffer", "4096"}}}
	}, syscall.SIGKILL, false, 20000, 120000, 4, 5000)
}

// Stream sockets in the acknowledged mode: the producer counts as
// delivered only what the aggregator acknowledged as written, and sends
// everything else again after reconnecting.
func TestSIGKILLLosesNothingDeliveredAck(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	restartAcknowledged(t, syscall.SIGKILL)
}

// A SIGTERM drains: a connection in the acknowledged mode is closed only
// once everything read from it is acknowledged, so the producers send
// nothing twice across restarts (a SIGKILL may duplicate the last batch).
func TestSIGTERMDuplicatesNothingAck(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	restartAcknowledged(t, syscall.SIGTERM)
}

// restartAcknowledged stops the aggregator with sig four times under three
// acknowledged producers (unix stream, unix stream buffered, TCP) and
// restarts it on the same addresses.
func restartAcknowledged(t *testing.T, sig syscall.Signal) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	// Every restart must listen where the producers reconnect: a port
	// that was free a moment ago.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp := "tcp://" + l.Addr().String()
	l.Close()
	killRepeatedly(t, dir, []string{"--listen", "unix://" + sock, "--listen", tcp, "--fsync", "batch"}, func(p *aggProc) []crashTarget {
		return []crashTarget{
			{"unixsock", "unix://" + sock, []string{"--ack"}},
			{"unixsock", "unix://" + sock, []string{"--ack", "--buffer", "4096"}},
			{"tcp", tcp, []string{"--ack"}},
		}
	}, sig, sig == syscall.SIGTERM, 20000, 120000, 4, 5000)
}
