package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// TestTapShowsWhatFlows: aggregator tap, the real command against the real
// daemon, prints the records its match selects, as written.
func TestTapShowsWhatFlows(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := testenv.ShortTempDir(t)
	ctl := filepath.Join(dir, "control.sock")
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unixgram://"+sock, "--control", ctl)
	var st syscall.Stat_t
	if err := syscall.Stat(ctl, &st); err != nil || st.Mode&0o777 != 0o600 {
		t.Fatalf("control socket mode %o (%v), want 600", st.Mode&0o777, err)
	}
	tap := exec.Command(testenv.Binary(t, "aggregator"), "tap", "--control", ctl, "--match", "app: tapme", "--count", "2")
	var out, errb syncBuffer // written by exec's copying goroutines while polled
	tap.Stdout, tap.Stderr = &out, &errb
	if err := tap.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tap.Process.Kill() })
	// The tap is registered once the daemon answered it: send until two
	// matching records came through.
	done := make(chan error, 1)
	go func() { done <- tap.Wait() }()
	i := 0
	testenv.Poll(t, 20*time.Second, "two tapped records", func() (string, bool) {
		i++
		logger(t, sock, "other", fmt.Sprintf("not tapped %d", i))
		logger(t, sock, "tapme", fmt.Sprintf("tapped %d", i))
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("tap: %v\n%s", err, errb.String())
			}
			return "", true
		default:
			return errb.String(), false
		}
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("tap printed %d lines:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var r struct {
			Message string
			Syslog  struct{ Appname string }
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Syslog.Appname != "tapme" || !strings.HasPrefix(r.Message, "tapped ") {
			t.Errorf("tapped %q (%v)", l, err)
		}
	}
	p.stop(syscall.SIGTERM)
}

func logger(t *testing.T, sock, tag, msg string) {
	t.Helper()
	if out, err := exec.Command("logger", "-u", sock, "-t", tag, "--", msg).CombinedOutput(); err != nil {
		t.Fatalf("logger: %v\n%s", err, out)
	}
}

// TestSlowTapLosesOnlyItsCopies: a tap that never reads holds the pipeline
// back not at all: every record reaches the output, and the tap, once it
// reads, is told how many copies it lost.
func TestSlowTapLosesOnlyItsCopies(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := testenv.ShortTempDir(t)
	ctl := filepath.Join(dir, "control.sock")
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--control", ctl)
	c, err := net.Dial("unix", ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(`{"tap":{}}` + "\n"))
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || !strings.Contains(l, `"ok":true`) {
		t.Fatalf("tap answer %q, %v", l, err)
	}
	const n = 100000
	prod := exec.Command(testenv.Binary(t, "producer"), "unixsock", "200", "--addr", "unix://"+sock, "--count", fmt.Sprint(n), "--rate", "0")
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("producer: %v\n%s", err, out)
	}
	p.waitMetric(n, "logagg_records_out_total")
	dropped := int64(0)
	testenv.Poll(t, 20*time.Second, "the tap's count of lost copies", func() (string, bool) {
		c.SetReadDeadline(time.Now().Add(time.Second))
		l, err := r.ReadString('\n')
		if strings.Contains(l, `"tap":"dropped"`) {
			var d struct{ Records int64 }
			json.Unmarshal([]byte(l), &d)
			dropped += d.Records
			return l, true
		}
		return fmt.Sprint(err), false
	})
	if dropped <= 0 {
		t.Errorf("dropped %d copies", dropped)
	}
	t.Logf("%d records written; the tap lost %d+ copies", n, dropped)
	p.stop(syscall.SIGTERM)
}

// TestControlSocketRefusesOthers: the control socket is the daemon's
// user's: another user cannot connect.
func TestControlSocketRefusesOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	testenv.RequireRoot(t)
	dir := testenv.ShortTempDir(t)
	os.Chmod(dir, 0o755)
	ctl := filepath.Join(dir, "control.sock")
	startAgg(t, dir, "--listen", "unixgram://"+filepath.Join(dir, "s.sock"), "--control", ctl)
	tap := exec.Command(testenv.Binary(t, "aggregator"), "tap", "--control", ctl, "--count", "1")
	tap.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := tap.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Errorf("nobody's tap: %v\n%s", err, out)
	}
}
