package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// TestRunHelperProcess is not a test: it is `aggregator run` as a separate
// process (the exec helper pattern), so these tests do not depend on how
// main.go dispatches subcommands. Arguments after the test binary's "--"
// are runCommand's.
func TestRunHelperProcess(t *testing.T) {
	if os.Getenv("LOGAGG_RUN_HELPER") != "1" {
		t.Skip("helper process only")
	}
	os.Exit(runCommand(flag.Args(), os.Stderr))
}

// aggRun is one `aggregator run` process.
type aggRun struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	output string
	done   chan struct{}
	err    error
}

func startRun(t *testing.T, dir string, args ...string) *aggRun {
	t.Helper()
	r := &aggRun{output: filepath.Join(dir, "out.jsonl"), done: make(chan struct{})}
	full := append([]string{"-test.run=^TestRunHelperProcess$", "--", "--output", r.output, "--fsync", "never"}, args...)
	r.cmd = exec.Command(os.Args[0], full...)
	r.cmd.Env = append(os.Environ(), "LOGAGG_RUN_HELPER=1")
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// exitCode waits for the process and returns its exit status.
func (r *aggRun) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("aggregator run did not exit; stderr:\n%s", r.stderr.String())
	}
	var ee *exec.ExitError
	switch {
	case r.err == nil:
		return 0
	case errors.As(r.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("wait: %v", r.err)
	return -1
}

type runRec struct {
	Message  string `json:"message"`
	Event    string `json:"event"`
	ExitCode *int   `json:"exit_code"`
	Signal   string `json:"signal"`
	PID      int    `json:"pid"`
	Agg      struct {
		Transport string   `json:"transport"`
		Stream    string   `json:"stream"`
		Flags     []string `json:"flags"`
		Peer      *struct {
			PID int    `json:"pid"`
			UID int    `json:"uid"`
			Via string `json:"via"`
		} `json:"peer"`
	} `json:"agg"`
}

func readRunRecords(t *testing.T, path string) []runRec {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []runRec
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r runRec
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func TestRunCapturesStreamsAndExitsWithChildStatus(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	r := startRun(t, dir, "--", "sh", "-c", `echo "pid $$"; echo err >&2; printf partial; exit 3`)
	if code := r.exitCode(t); code != 3 {
		t.Fatalf("exit status %d, want the child's 3; stderr:\n%s", code, r.stderr.String())
	}
	recs := readRunRecords(t, r.output)
	if len(recs) != 4 {
		t.Fatalf("got %d records, want 4: %+v", len(recs), recs)
	}
	var pid int
	if _, err := fmt.Sscanf(recs[0].Message, "pid %d", &pid); err != nil {
		// stdout and stderr are separate pipes: order across them is not
		// defined, so find the stdout line.
		for _, rec := range recs {
			if strings.HasPrefix(rec.Message, "pid ") {
				fmt.Sscanf(rec.Message, "pid %d", &pid)
			}
		}
	}
	if pid == 0 {
		t.Fatalf("no pid line: %+v", recs)
	}
	want := map[string]string{"pid " + fmt.Sprint(pid): "stdout", "err": "stderr", "partial": "stdout"}
	for _, rec := range recs[:3] {
		if s, ok := want[rec.Message]; !ok || rec.Agg.Stream != s {
			t.Errorf("record %q on stream %q, want one of %v", rec.Message, rec.Agg.Stream, want)
		}
		if rec.Agg.Transport != "exec" || rec.Agg.Peer == nil || rec.Agg.Peer.PID != pid || rec.Agg.Peer.Via != "kernel" || rec.Agg.Peer.UID != os.Geteuid() {
			t.Errorf("record %q: agg %+v, want exec, pid %d via kernel", rec.Message, rec.Agg, pid)
		}
		if rec.Message == "partial" && (len(rec.Agg.Flags) != 1 || rec.Agg.Flags[0] != "partial") {
			t.Errorf("unterminated line flags %v, want [partial]", rec.Agg.Flags)
		}
	}
	last := recs[3]
	if last.Event != "exit" || last.ExitCode == nil || *last.ExitCode != 3 || last.PID != pid {
		t.Errorf("last record %+v, want the exit record (code 3, pid %d)", last, pid)
	}
}

func TestRunForwardsSIGTERM(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	r := startRun(t, dir, "--", "sh", "-c", "echo ready; sleep 60")
	if _, ok := testenv.Until(30*time.Second, func() (struct{}, bool) {
		b, _ := os.ReadFile(r.output)
		return struct{}{}, bytes.Contains(b, []byte(`"ready"`))
	}); !ok {
		t.Fatalf("child output never written; stderr:\n%s", r.stderr.String())
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.exitCode(t); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit status %d, want 143 (child killed by SIGTERM); stderr:\n%s", code, r.stderr.String())
	}
	recs := readRunRecords(t, r.output)
	last := recs[len(recs)-1]
	if last.Event != "exit" || last.Signal != "SIGTERM" || last.ExitCode == nil || *last.ExitCode != 143 {
		t.Errorf("last record %+v, want exit by SIGTERM", last)
	}
}

// The child logs to a unix socket the same aggregator serves: both paths
// name the same process.
func TestRunServesOtherListenersToo(t *testing.T) {
	logger := testenv.RequireCommand(t, "logger")
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s")
	r := startRun(t, dir, "--listen", "unix://"+sock, "--", logger, "-u", sock, "--rfc3164", "hello over unix")
	if code := r.exitCode(t); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, r.stderr.String())
	}
	recs := readRunRecords(t, r.output)
	var unixPID, exitPID int
	for _, rec := range recs {
		switch {
		case rec.Agg.Transport == "unix" && strings.Contains(rec.Message, "hello over unix"):
			unixPID = rec.Agg.Peer.PID
		case rec.Event == "exit":
			exitPID = rec.PID
		}
	}
	if unixPID == 0 || unixPID != exitPID {
		t.Errorf("unix record pid %d, exit record pid %d: want the same child; records %+v", unixPID, exitPID, recs)
	}
}

func TestRunBadUsage(t *testing.T) {
	var stderr bytes.Buffer
	if code := runCommand(nil, &stderr); code != 2 || !strings.Contains(stderr.String(), "no command") {
		t.Errorf("no command: status %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := runCommand([]string{"--", "/nonexistent/logagg-nope"}, &stderr); code != 127 {
		t.Errorf("missing program: status %d, want 127; %q", code, stderr.String())
	}
}

// The real binary: `seq 1000 | aggregator --listen stdin://` ends at EOF
// with everything written.
func TestStdinListenerExitsAtEOF(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	out := filepath.Join(dir, "out.jsonl")
	cmd := exec.Command(testenv.Binary(t, "aggregator"), "--listen", "stdin://", "--output", out, "--fsync", "never")
	var in strings.Builder
	const n = 1000
	for i := 0; i < n; i++ {
		fmt.Fprintf(&in, "{\"message\":\"line %d\"}\n", i)
	}
	cmd.Stdin = strings.NewReader(in.String()) // a pipe, fed by exec
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("aggregator: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done // exec's copy into stderr has ended
		t.Fatalf("aggregator did not exit at EOF; stderr:\n%s", stderr.String())
	}
	recs := readRunRecords(t, out)
	if len(recs) != n {
		t.Fatalf("got %d records, want %d", len(recs), n)
	}
	for i, rec := range recs {
		if rec.Message != fmt.Sprintf("line %d", i) || rec.Agg.Transport != "stdin" {
			t.Fatalf("record %d = %+v", i, rec)
		}
	}
}
