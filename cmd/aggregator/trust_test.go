package main

// Trust: what the aggregator does with addresses, files and identities that
// other processes and users share with it (issue 13).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	// It must exit with an error; writing (or still running after 20 s)
	// means it took the addresses.
	type exit struct {
		done bool
		err  error
	}
	second, _ := testenv.Until(20*time.Second, func() (exit, bool) {
		select {
		case err := <-done:
			return exit{true, err}, true
		default:
			return exit{}, strings.Contains(stderr.String(), "aggregator: writing")
		}
	})
	if !second.done {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		t.Fatalf("a second aggregator started on the first one's addresses:\n%s", stderr.String())
	}
	if second.err == nil {
		t.Fatalf("the second aggregator exited 0:\n%s", stderr.String())
	}
	want := "pid " + strconv.Itoa(first.pid())
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

// finalCounts parses the per-listener "final counts" lines the aggregator
// logs at exit and sums records_in - records_out over them.
func finalCounts(t *testing.T, log string) (in, out int64) {
	t.Helper()
	re := regexp.MustCompile(`msg="final counts" .*records_in=(\d+) records_out=(\d+)`)
	ms := re.FindAllStringSubmatch(log, -1)
	if len(ms) == 0 {
		t.Fatalf("no final counts in the log:\n%s", log)
	}
	for _, m := range ms {
		i, _ := strconv.ParseInt(m[1], 10, 64)
		o, _ := strconv.ParseInt(m[2], 10, 64)
		in, out = in+i, out+o
	}
	return in, out
}

// SIGTERM while the disk is full: the aggregator cannot write what it
// accepted. It must say so: exit non-zero, print exactly how many records
// (and bytes) were lost and why, the count being records_in - records_out,
// and leave a file of whole, valid JSON lines (no torn last line).
func TestSIGTERMOnFullDiskIsHonest(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "needs root to mount a small tmpfs")
	}
	dir := testenv.ShortTempDir(t)
	disk := filepath.Join(dir, "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", disk).CombinedOutput(); err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("cannot mount a tmpfs: %v %s", err, out))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", disk).Run() })
	sock := filepath.Join(dir, "s.sock")
	output := filepath.Join(disk, "out.jsonl")
	cmd := exec.Command(testenv.Binary(t, "aggregator"), "--output", output, "--listen", "unix://"+sock,
		"--metrics", "127.0.0.1:0", "--drain-timeout", "1s", "--queue-batches", "16")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitLog := func(what string) {
		t.Helper()
		testenv.Poll(t, 30*time.Second, fmt.Sprintf("%q in the log", what), func() (string, bool) {
			log := stderr.String()
			return log, strings.Contains(log, what)
		})
	}
	waitLog("aggregator: writing")
	for i := range 3 {
		p := exec.Command(testenv.Binary(t, "producer"), "unixsock", "300", "--addr", "unix://"+sock,
			"--rate", "0", "--duration", "60s", "--seq", "--id", "full-"+strconv.Itoa(i), "--reconnect=false")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	}
	waitLog("write output failed") // the disk is full and producers are held back
	cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM:\n%s", stderr.String())
	}
	log := stderr.String()
	if err == nil {
		t.Errorf("exit status 0 although records were not written:\n%s", log)
	}
	var lost, out int64 = -1, -1
	if m := regexp.MustCompile(`aggregator: (\d+) records \((\d+) bytes\) accepted but not written`).FindStringSubmatch(log); m == nil {
		t.Errorf("no count of unwritten records printed:\n%s", log)
	} else {
		lost, _ = strconv.ParseInt(m[1], 10, 64)
		var in int64
		in, out = finalCounts(t, log)
		if lost == 0 || lost != in-out {
			t.Errorf("printed %d records lost; records_in %d - records_out %d = %d", lost, in, out, in-out)
		}
	}
	b, rerr := os.ReadFile(output)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("output does not end with a newline (torn last line): ...%q", b[max(0, len(b)-80):])
	}
	lines := bytes.Split(b[:len(b)-1], []byte("\n"))
	for i, line := range lines {
		if !json.Valid(line) {
			t.Fatalf("line %d of %d is not valid JSON: %q", i+1, len(lines), line)
		}
	}
	if out >= 0 && int64(len(lines)) != out {
		t.Errorf("%d lines in the file, records_out says %d", len(lines), out)
	}
	t.Logf("%d records written, %d lost and counted\n%s", len(lines), lost, log)
}

// An external logrotate renames the active file while the aggregator
// rotates by size: 20 renames racing internal rotations. No rotation may
// fail ("rotate ... no such file"), no write may fail (a failed write is
// what would stall the writer: it is retried a second later), and every
// record is in some file exactly once. The longest pause between two
// records is logged, not asserted: on a loaded machine the producer's own
// scheduling makes pauses as long.
func TestExternalRenameDuringRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	const maxSize = 32 << 10
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--max-size", strconv.Itoa(maxSize), "--max-files", "0",
		"--queue-batches", "4", "--batch-bytes", "4KiB")
	prod := exec.Command(testenv.Binary(t, "producer"), "unixsock", "200", "--addr", "unix://"+sock,
		"--rate", "2000", "--duration", "60s", "--seq", "--id", "rot", "--reconnect=false", "--json-summary")
	var prodErr bytes.Buffer
	prod.Stderr = &prodErr
	if err := prod.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Process.Kill(); prod.Wait() })

	// Every other active file is renamed away when it is close to the size
	// at which the aggregator rotates it (racing that rotation); the others
	// are rotated by the aggregator itself. A new active file (a new inode
	// at the path) starts the next cycle.
	renames, rotations := 0, 0
	var lastIno uint64
	testenv.Until(20*time.Second, func() (struct{}, bool) {
		var st syscall.Stat_t
		if err := syscall.Stat(p.output, &st); err != nil || st.Ino == lastIno {
			return struct{}{}, false
		}
		if (renames+rotations)%2 == 0 {
			if st.Size < maxSize*9/10 {
				return struct{}{}, false
			}
			if err := os.Rename(p.output, fmt.Sprintf("%s.ext-%02d", p.output, renames)); err == nil {
				renames++
			}
		} else {
			rotations++ // leave this one to the aggregator
		}
		lastIno = st.Ino
		return struct{}{}, renames >= 20
	})
	prod.Process.Signal(syscall.SIGTERM)
	if err := prod.Wait(); err != nil {
		t.Fatalf("producer: %v\n%s", err, prodErr.String())
	}
	var sum struct{ Sent int64 }
	if err := jsonLastLine(prodErr.Bytes(), &sum); err != nil || sum.Sent == 0 {
		t.Fatalf("producer summary: %v\n%s", err, prodErr.String())
	}
	count := uint64(sum.Sent)
	p.waitMetric(float64(count), "logagg_records_out_total")
	if n := p.metric("logagg_write_errors_total"); n != 0 {
		t.Errorf("%v failed writes while the file was renamed under the writer", n)
	}
	p.stop(syscall.SIGTERM)
	log := p.log()
	if renames < 20 {
		t.Errorf("only %d external renames in 20 s (rotations stalled?)", renames)
	}
	for _, bad := range []string{"rotate", "write output failed"} {
		if strings.Contains(log, bad) {
			t.Errorf("log mentions %q:\n%s", bad, log)
		}
	}
	files, _ := filepath.Glob(p.output + "*")
	recv := map[uint64]int64{}
	for _, f := range files {
		for _, line := range bytes.Split(mustRead(t, f), []byte("\n")) {
			st, ok := seqstamp.Find(line)
			if !ok {
				continue
			}
			if _, dup := recv[st.Seq]; dup {
				t.Fatalf("seq %d written twice", st.Seq)
			}
			var r struct {
				Agg struct {
					RecvNS int64 `json:"recv_ns"`
				} `json:"agg"`
			}
			if err := json.Unmarshal(line, &r); err != nil {
				t.Fatal(err)
			}
			recv[st.Seq] = r.Agg.RecvNS
		}
	}
	var worst time.Duration
	var worstAt uint64
	for seq := uint64(1); seq <= count; seq++ {
		ns, ok := recv[seq]
		if !ok {
			t.Fatalf("seq %d missing (%d files, %d records)", seq, len(files), len(recv))
		}
		if prev, ok := recv[seq-1]; ok && time.Duration(ns-prev) > worst {
			worst, worstAt = time.Duration(ns-prev), seq
		}
	}
	t.Logf("%d external renames, %d files; longest pause between two records %v (before seq %d)", renames, len(files), worst, worstAt)
	if rotated, _ := filepath.Glob(p.output + ".[0-9]*"); len(rotated) < 10 {
		t.Errorf("%d internal rotations: too few to race the renames", len(rotated))
	}
}

// TestProducerRefusesAnotherUsersQueue: a POSIX queue name is global, so
// any user can create /NAME before the aggregator does. Here nobody does,
// with mode 0666, and reads it (an aggregator run as nobody). Our
// aggregator refuses to start on another user's queue; the producer used
// to write every record into it and exit 0, and nobody read them all.
// Now it refuses before sending anything, naming the owner; told that the
// aggregator runs as nobody (--aggregator-user), it delivers.
func TestProducerRefusesAnotherUsersQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	testenv.RequireRoot(t)
	dir := testenv.ShortTempDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("/logagg-squat-%d", os.Getpid())
	t.Cleanup(func() { mqueue.Unlink(queue) })
	url := "mq://" + queue

	squatter := exec.Command(testenv.Binary(t, "aggregator"), "--listen", url, "--socket-mode", "0666",
		"--output", filepath.Join(dir, "nobody.jsonl"), "--metrics", "127.0.0.1:0", "--fsync", "never")
	squatter.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testenv.Nobody, Gid: testenv.Nobody}}
	var squatLog syncBuffer
	squatter.Stderr = &squatLog
	if err := squatter.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { squatter.Process.Kill(); squatter.Wait() })
	metricsURL := testenv.Poll(t, 20*time.Second, "nobody's aggregator to start", func() (string, bool) {
		m := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(squatLog.String())
		if m == nil || !strings.Contains(squatLog.String(), "aggregator: writing") {
			return squatLog.String(), false
		}
		return m[1], true
	})
	recordsIn := func() string {
		resp, err := http.Get(metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^logagg_records_in_total\{[^}]*\} (\S+)$`).FindSubmatch(b)
		if m == nil {
			return "0"
		}
		return string(m[1])
	}

	out, err := exec.Command(testenv.Binary(t, "aggregator"), "--listen", url, "--output", filepath.Join(dir, "root.jsonl")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another user's") {
		t.Errorf("our aggregator on nobody's queue: %v\n%s", err, out)
	}

	out, err = exec.Command(testenv.Binary(t, "producer"), "mq", "50", "--addr", url, "--count", "200", "--rate", "0",
		"--seq", "--id", "squatted").CombinedOutput()
	if err == nil {
		t.Errorf("the producer wrote to nobody's queue and exited 0:\n%s", out)
	} else if !strings.Contains(string(out), "not the aggregator's") || !strings.Contains(string(out), "nobody") {
		t.Errorf("the producer's refusal does not say whose queue it is: %v\n%s", err, out)
	}
	time.Sleep(300 * time.Millisecond) // nobody reads at once; give it time to read what it got
	if got := recordsIn(); got != "0" {
		t.Fatalf("nobody read %s records from its queue", got)
	}

	out, err = exec.Command(testenv.Binary(t, "producer"), "mq", "50", "--addr", url, "--count", "200", "--rate", "0",
		"--seq", "--id", "trusted", "--aggregator-user", "nobody").CombinedOutput()
	if err != nil {
		t.Fatalf("the producer trusting nobody: %v\n%s", err, out)
	}
	testenv.Poll(t, 20*time.Second, "nobody's aggregator to read the trusting producer's records", func() (string, bool) {
		got := recordsIn()
		return got, got == "200"
	})
}
