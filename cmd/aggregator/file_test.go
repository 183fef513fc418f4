package main

// The file:// input with the real daemon: a writer appends 100-byte lines
// at 100,000 lines/s and rotates every MiB, alternating rename-and-create
// and copytruncate, while the aggregator is SIGKILLed and restarted three
// times; every line must be in the output at least once.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// rotatingWriter appends numbered 100-byte lines to path at rate lines/s
// for dur, rotating every rotateBytes into path.1, path.2, … (the rotated
// files stay, as logrotate's dateext leaves them), alternating
// rename-and-create and copytruncate. It returns the number of lines.
func rotatingWriter(t *testing.T, path string, rate int, dur time.Duration, rotateBytes int64, rotated func(n int)) int {
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
	for time.Since(begin) < dur {
		due := int(time.Since(begin).Seconds() * float64(rate))
		batch = batch[:0]
		for ; seq < due; seq++ {
			copy(line, fmt.Sprintf("seq=%010d ", seq))
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
	return seq
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

	const rate, dur, rotateAt = 100000, 4 * time.Second, 1 << 20
	kills := make(chan int, 16)
	written := make(chan int, 1)
	go func() {
		written <- rotatingWriter(t, path, rate, dur, rotateAt, func(n int) {
			if n%12 == 10 && n/12 < 3 { // three kills, spread over the run
				kills <- n
			}
		})
	}()
	killed := 0
	var total int
	for total == 0 {
		select {
		case n := <-kills:
			p.signal(syscall.SIGKILL)
			<-p.exited()
			killed++
			t.Logf("SIGKILL %d after rotation %d", killed, n)
			p = startAgg(t, dir, args...)
		case total = <-written:
		}
	}
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
