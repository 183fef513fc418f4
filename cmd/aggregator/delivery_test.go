package main

// Delivery that survives the aggregator's crash (issue 13 item 5): the
// aggregator is SIGKILLed again and again under load and restarted on the
// same addresses; every record a producer reports delivered must be in the
// output. Duplicates are allowed (at-least-once) and counted.

import (
	"bufio"
	"bytes"
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
// target (seq-stamped, at rate records/s, count records each), SIGKILLs
// the aggregator kills times, each time once it has written `every`
// records since its start, and restarts it at once on the same addresses.
// It then waits for the producers, stops the last aggregator with SIGTERM
// and checks that every sequence number up to each producer's reported
// delivered count is in the output.
func killRepeatedly(t *testing.T, dir string, args []string, targets func(p *aggProc) []crashTarget, rate, count, kills, every int) {
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
	for k := 0; k < kills; k++ {
		if got := p.waitMetric(float64(every), "logagg_records_out_total"); got < float64(every) {
			t.Fatalf("kill %d: only %.0f records written\n%s", k+1, got, p.log())
		}
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
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
	f, err := os.Open(p.output)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if st, ok := seqstamp.Find(sc.Bytes()); ok {
			if got[st.Producer] == nil {
				got[st.Producer] = map[uint64]int{}
			}
			got[st.Producer][st.Seq]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
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
		t.Logf("producer %s: delivered %d, %d missing, %d duplicates, %d reconnects over %d SIGKILLs",
			pr.id, s.Delivered, missing, dups, s.Reconnects, kills)
		if missing > 0 {
			t.Errorf("producer %s: %d delivered records missing", pr.id, missing)
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
	}, 20000, 120000, 4, 5000)
}
