package main

// Trust: what the aggregator does with addresses, files and identities that
// other processes and users share with it (issue 13).

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
)

// A second aggregator on the addresses of a running one (unix, unixgram,
// FIFO, shm and mq) fails at start-up naming the first one's pid, and
// touches nothing: the first keeps its sockets, FIFO, queue and output
// file, and every transport still delivers to it.
func TestSecondInstanceRefused(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	queue := fmt.Sprintf("/logagg-second-%d", os.Getpid())
	t.Cleanup(func() { mqueue.Unlink(queue) })
	urls := map[string]string{
		"unixsock": "unix://" + filepath.Join(dir, "u.sock"),
		"unixgram": "unixgram://" + filepath.Join(dir, "g.sock"),
		"fifo":     "fifo://" + filepath.Join(dir, "f.fifo"),
		"shm":      "shm://" + filepath.Join(dir, "s.sock"),
		"mq":       "mq://" + queue,
	}
	var args []string
	for _, u := range urls {
		args = append(args, "--listen", u)
	}
	first := startAgg(t, dir, args...)
	inodes := map[string]uint64{}
	for name, u := range urls {
		if name == "mq" {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(u[strings.Index(u, "://")+3:], &st); err != nil {
			t.Fatal(err)
		}
		inodes[name] = st.Ino
	}

	// The second one: same addresses, same output.
	cmd := exec.Command(testenv.Binary(t, "aggregator"), append([]string{"--output", first.output}, args...)...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for exited := false; !exited; {
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("the second aggregator exited 0:\n%s", stderr.String())
			}
			exited = true
		case <-time.After(10 * time.Millisecond):
			if strings.Contains(stderr.String(), "aggregator: writing") || time.Now().After(deadline) {
				cmd.Process.Signal(syscall.SIGTERM)
				<-done
				t.Fatalf("a second aggregator started on the first one's addresses:\n%s", stderr.String())
			}
		}
	}
	want := "pid " + strconv.Itoa(first.cmd.Process.Pid)
	if !strings.Contains(stderr.String(), "in use") || !strings.Contains(stderr.String(), want) {
		t.Errorf("the refusal does not say the address is in use by %s:\n%s", want, stderr.String())
	}

	for name, u := range urls {
		if name == "mq" {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(u[strings.Index(u, "://")+3:], &st); err != nil || st.Ino != inodes[name] {
			t.Errorf("%s: the first aggregator's %s was removed or replaced by the second (%v)", name, u, err)
		}
	}
	for name, u := range urls {
		out, err := exec.Command(testenv.Binary(t, "producer"), name, "100", "--addr", u, "--count", "3",
			"--rate", "0", "--seq", "--id", "second-"+name, "--reconnect=false").CombinedOutput()
		if err != nil {
			t.Errorf("%s: producer to the first aggregator failed: %v\n%s", name, err, out)
		}
	}
	first.waitMetric(float64(3*len(urls)), "logagg_records_out_total")
	first.stop(syscall.SIGTERM)
	got := map[string]int{}
	for _, line := range bytes.Split(mustRead(t, first.output), []byte("\n")) {
		if st, ok := seqstamp.Find(line); ok {
			got[st.Producer]++
		}
	}
	for name := range urls {
		if got["second-"+name] != 3 {
			t.Errorf("%s: %d of 3 records reached the first aggregator", name, got["second-"+name])
		}
	}
}
