package main

// The file:// input with the real daemon: a writer appends 100-byte lines
// at 100,000 lines/s and rotates every MiB, alternating rename-and-create
// and copytruncate, while the aggregator is SIGKILLed and restarted three
// times; every line must be in the output at least once.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// rotatingWriter appends numbered 100-byte lines to path at rate lines/s
// until stop is closed, rotating every rotateBytes into path.1, path.2, … (the rotated
// files stay, as logrotate's dateext leaves them), alternating
// rename-and-create and copytruncate. It returns the number of lines.
func rotatingWriter(t *testing.T, path string, rate int, stop <-chan struct{}, rotateBytes int64, rotated func(n int)) int {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { f.Close() }()
	var size int64
	seq, rotations := 0, 0
	begin := time.Now()
	line := make([]byte, 100)
	var batch []byte
	for {
		select {
		case <-stop:
			return seq
		default:
		}
		due := int(time.Since(begin).Seconds() * float64(rate))
		batch = batch[:0]
		for ; seq < due; seq++ {
			copy(line, "seq=")
			for i, v := 13, seq; i >= 4; i, v = i-1, v/10 {
				line[i] = '0' + byte(v%10)
			}
			line[14] = ' '
			for i := 15; i < 99; i++ {
				line[i] = 'a' + byte(seq+i)%26
			}
			line[99] = '\n'
			batch = append(batch, line...)
			if size+int64(len(batch)) >= rotateBytes {
				if _, err := f.Write(batch); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
				rotations++
				next := fmt.Sprintf("%s.%d", path, rotations)
				if rotations%2 == 1 { // rename and create
					if err := os.Rename(path, next); err != nil {
						t.Fatal(err)
					}
					f.Close()
					if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
						t.Fatal(err)
					}
				} else { // copytruncate
					src, err := os.Open(path)
					if err != nil {
						t.Fatal(err)
					}
					dst, err := os.Create(next)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := io.Copy(dst, src); err != nil {
						t.Fatal(err)
					}
					src.Close()
					dst.Close()
					if err := f.Truncate(0); err != nil {
						t.Fatal(err)
					}
				}
				size = 0
				rotated(rotations)
			}
		}
		if len(batch) > 0 {
			if _, err := f.Write(batch); err != nil {
				t.Fatal(err)
			}
			size += int64(len(batch))
		}
		time.Sleep(time.Millisecond)
	}
}

// outputSeqs counts every seq= line in the output files.
func outputSeqs(t *testing.T, output string) map[int]int {
	t.Helper()
	got := map[int]int{}
	files, _ := filepath.Glob(output + ".*")
	for _, name := range append(files, output) {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			i := bytes.Index(sc.Bytes(), []byte(`"message":"seq=`))
			if i < 0 {
				continue
			}
			s := sc.Bytes()[i+15:]
			if len(s) < 10 {
				continue
			}
			n, err := strconv.Atoi(string(s[:10]))
			if err == nil {
				got[n]++
			}
		}
		f.Close()
	}
	return got
}

func TestFileSIGKILLUnderRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("writes for seconds")
	}
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	os.Mkdir(logs, 0o755)
	path := filepath.Join(logs, "app.log")
	os.WriteFile(path, nil, 0o644)
	args := []string{"--listen", "file://" + path + "*?from=start"}
	p := startAgg(t, dir, args...)

	// Each aggregator lives a little longer than the checkpoint interval
	// (1 s), so that each kill finds a checkpoint it saved itself; the
	// writer goes on for a second after the third restart.
	const rate, rotateAt, life = 100000, 1 << 20, 1300 * time.Millisecond
	written := make(chan int, 1)
	stop := make(chan struct{})
	var rotations atomic.Int64
	begin := time.Now()
	go func() {
		written <- rotatingWriter(t, path, rate, stop, rotateAt, func(n int) { rotations.Store(int64(n)) })
	}()
	killed := 0
	for killed < 3 {
		time.Sleep(life)
		p.signal(syscall.SIGKILL)
		<-p.exited()
		killed++
		t.Logf("SIGKILL %d after rotation %d", killed, rotations.Load())
		p = startAgg(t, dir, args...)
	}
	time.Sleep(time.Second)
	close(stop)
	total := <-written
	dur := time.Since(begin)
	if killed != 3 {
		t.Fatalf("%d kills, want 3", killed)
	}
	// Everything written once the input has no lag left and nothing
	// more comes for a while (a rotated copy may wait to be told apart).
	last, since := -1.0, time.Now()
	testenv.Poll(t, 60*time.Second, "the input to catch up", func() (string, bool) {
		lag, out := p.metric("logagg_input_lag_bytes"), p.metric("logagg_records_out_total")
		if out != last {
			last, since = out, time.Now()
		}
		return fmt.Sprintf("lag %.0f bytes, %.0f records out", lag, out), lag == 0 && time.Since(since) > 3*time.Second
	})
	p.stop(syscall.SIGTERM)
	got := outputSeqs(t, p.output)
	missing, dups := 0, 0
	for i := range total {
		switch n := got[i]; {
		case n == 0:
			if missing < 5 {
				t.Errorf("line %d missing", i)
			}
			missing++
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("lines written twice: %s", ranges(got, total))
	rotated, _ := filepath.Glob(path + ".*")
	t.Logf("%d lines written in %v with %d rotations, aggregator SIGKILLed %d times: %d missing, %d duplicates (%.2f%%)",
		total, dur, len(rotated), killed, missing, dups, 100*float64(dups)/float64(total))
	if missing > 0 {
		t.Fatalf("%d of %d lines missing", missing, total)
	}
}

// ranges lists the runs of lines seen more than once, "a-b" each.
func ranges(got map[int]int, total int) string {
	var b bytes.Buffer
	for i := 0; i < total; i++ {
		if got[i] < 2 {
			continue
		}
		j := i
		for j+1 < total && got[j+1] >= 2 {
			j++
		}
		fmt.Fprintf(&b, " %d-%d", i, j)
		i = j
	}
	return b.String()
}

// TestFileUnreadableReported: an aggregator running as nobody is given a
// glob matching a file it may not read (root's, mode 0600) next to one it
// may: the first is reported with its cause and never read, the second
// is read.
func TestFileUnreadableReported(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "needs root to run the aggregator as nobody")
	}
	dir := testenv.ShortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logs, state := filepath.Join(dir, "logs"), filepath.Join(dir, "state")
	os.Mkdir(logs, 0o755)
	os.Mkdir(state, 0o755)
	os.Chown(state, testenv.Nobody, testenv.Nobody)
	os.WriteFile(filepath.Join(logs, "secret.log"), []byte("secret line\n"), 0o600)
	os.WriteFile(filepath.Join(logs, "open.log"), []byte("open line\n"), 0o644)
	bin := filepath.Join(dir, "aggregator")
	b, err := os.ReadFile(testenv.Binary(t, "aggregator"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bin, b, 0o755)
	out := filepath.Join(state, "out.jsonl")
	cmd := exec.Command(bin, "--listen", "file://"+logs+"/*.log?from=start", "--output", out, "--fsync", "never")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testenv.Nobody, Gid: testenv.Nobody}}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testenv.Poll(t, 20*time.Second, "the readable file's line and the report", func() (string, bool) {
		b, _ := os.ReadFile(out)
		return stderr.String(), bytes.Contains(b, []byte("open line")) &&
			bytes.Contains([]byte(stderr.String()), []byte("cause=permission_denied"))
	})
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	b, _ = os.ReadFile(out)
	if bytes.Contains(b, []byte("secret")) {
		t.Fatalf("the unreadable file was read: %s", b)
	}
	if n := bytes.Count([]byte(stderr.String()), []byte("cause=permission_denied")); n != 1 {
		t.Errorf("reported %d times, want once:\n%s", n, stderr.String())
	}
	t.Logf("log:\n%s", stderr.String())
}

// TestFileReload: SIGHUP removes a file:// input (it stops, saves its
// checkpoint and lets go of its lock) and adds it back: what was appended
// meanwhile arrives, and nothing twice.
func TestFileReload(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	out := filepath.Join(dir, "out.jsonl")
	cfgPath := filepath.Join(dir, "logagg.yaml")
	writeCfg := func(files ...string) {
		t.Helper()
		var l []string
		for _, f := range files {
			l = append(l, strconv.Quote("file://"+f+"?from=start"))
		}
		body := fmt.Sprintf("listen: [%s]\noutput: {path: %s, fsync: never}\n", strings.Join(l, ", "), out)
		if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	appendTo := func(p, s string) {
		f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		f.WriteString(s)
		f.Close()
	}
	count := func(msg string) int {
		b, _ := os.ReadFile(out)
		return bytes.Count(b, []byte(`"message":"`+msg+`"`))
	}
	appendTo(a, "a1\n")
	appendTo(b, "b1\n")
	writeCfg(a, b)
	cmd, stderr, exited := startWithConfig(t, cfgPath)
	waitFor(t, 10*time.Second, func() bool { return count("a1") == 1 && count("b1") == 1 }, stderr.String)

	writeCfg(b)
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(stderr.String(), "reload") }, stderr.String)
	appendTo(a, "a2\n")
	appendTo(b, "b2\n")
	waitFor(t, 10*time.Second, func() bool { return count("b2") == 1 }, stderr.String)
	time.Sleep(300 * time.Millisecond)
	if count("a2") != 0 {
		t.Fatalf("the removed input still reads\n%s", stderr.String())
	}

	writeCfg(a, b)
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool { return count("a2") == 1 }, stderr.String)
	appendTo(a, "a3\n")
	waitFor(t, 10*time.Second, func() bool { return count("a3") == 1 }, stderr.String)
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	for _, m := range []string{"a1", "a2", "a3", "b1", "b2"} {
		if n := count(m); n != 1 {
			t.Errorf("%s written %d times\n%s", m, n, stderr.String())
		}
	}
}

// TestFileRules: the rules see file records (transport file, the path in
// agg.file): one file's records go to an output of their own,
// another's are dropped, and the dropped file's checkpoint still moves to
// its end (dropped on purpose is handled).
func TestFileRules(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	out, outA := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "a.jsonl")
	os.WriteFile(a, []byte("from a\n"), 0o644)
	os.WriteFile(b, []byte("from b 1\nfrom b 2\n"), 0o644)
	cfg := fmt.Sprintf(`listen: [%q]
output: {path: %s, fsync: never}
outputs:
  a: {path: %s, fsync: never}
rules:
  - name: a-file
    match: {transport: file, file: {regex: %q}}
    route: [a]
    stop: true
  - name: b-file
    match: {file: {contains: "b.log"}}
    drop: true
`, "file://"+dir+"/*.log?from=start", out, outA, "^"+regexp.QuoteMeta(a)+"$")
	cfgPath := filepath.Join(dir, "logagg.yaml")
	os.WriteFile(cfgPath, []byte(cfg), 0o644)
	cmd, stderr, exited := startWithConfig(t, cfgPath)
	contains := func(path, msg string) bool { b, _ := os.ReadFile(path); return bytes.Contains(b, []byte(msg)) }
	waitFor(t, 10*time.Second, func() bool { return contains(outA, `"message":"from a"`) }, stderr.String)
	ckOffset := func() int64 {
		cks, _ := filepath.Glob(filepath.Join(dir, ".logagg-file-*.checkpoint"))
		if len(cks) != 1 {
			return -1
		}
		raw, _ := os.ReadFile(cks[0])
		var d struct {
			Files []struct {
				Path   string `json:"path"`
				Offset int64  `json:"offset"`
			} `json:"files"`
		}
		json.Unmarshal(raw, &d)
		for _, f := range d.Files {
			if f.Path == b {
				return f.Offset
			}
		}
		return -1
	}
	waitFor(t, 10*time.Second, func() bool { return ckOffset() == int64(len("from b 1\nfrom b 2\n")) }, func() string {
		return fmt.Sprintf("b's checkpoint at %d\n%s", ckOffset(), stderr.String())
	})
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	if contains(out, "from b") || contains(outA, "from b") || contains(out, "from a") {
		t.Errorf("records went where the rules did not send them\n%s", stderr.String())
	}
}
