// Package testenv helps tests that need real binaries or system features.
//
// Skip rule for the whole repository: a test that needs root, bpftrace, a
// broker or a browser skips outside CI and says why, but fails in CI
// (CI=true), where everything must run.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips the test with reason outside CI and fails it in CI.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("required in CI but unavailable: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot skips (or fails in CI) unless running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root")
	}
}

// RequireCommand skips (or fails in CI) unless name is on PATH.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		SkipOrFail(t, name+" not installed (scripts/setup.sh installs it)")
	}
	return p
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// RepoRoot is the module root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Binary returns the path of the named command of this module (e.g.
// "aggregator"), building it once per test process. With LOGAGG_BIN_DIR set
// (scripts/test.sh builds everything there first) the prebuilt one is used.
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if dir := os.Getenv("LOGAGG_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			built[name] = p
			return p
		}
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "logagg-bin-")
		if err != nil {
			t.Fatal(err)
		}
		// Readable by everyone: tests run binaries as other users (nobody).
		os.Chmod(d, 0o755)
		buildDir = d
	}
	p := filepath.Join(buildDir, name)
	cmd := exec.Command("go", "build", "-o", p, "./cmd/"+name)
	cmd.Dir = RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	built[name] = p
	return p
}

// ShortTempDir returns a temporary directory with a short path, removed at
// the end of the test: unix socket paths must fit in 108 bytes, which
// t.TempDir() under a long test name may not.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// Nobody is the uid and gid of the unprivileged user "nobody" (Debian's
// nobody:nogroup), the second user of tests about other users.
const Nobody = 65534

// NobodyRunner runs this test binary as the user nobody (helper
// processes: the test's TestMain decides from the environment what they do).
type NobodyRunner struct{ bin string }

// AsNobody copies this test binary into a directory nobody may enter (go
// test builds it in one only its owner can) for the rest of the test. It
// needs root, so it skips outside CI (fails in CI) otherwise.
func AsNobody(t testing.TB) *NobodyRunner {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root to run a helper as the user nobody")
	}
	dir, err := os.MkdirTemp("", "lgnobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(self))
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return &NobodyRunner{bin: bin}
}

// Command is the test binary, run as nobody with env added to this
// process's environment and no tests selected.
func (r *NobodyRunner) Command(env ...string) *exec.Cmd {
	cmd := exec.Command(r.bin, "-test.run=^$")
	cmd.Dir = filepath.Dir(r.bin)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: Nobody, Gid: Nobody}}
	return cmd
}

// Eventually polls cond until it holds, and fails the test naming what it
// waited for if it does not within limit. Tests wait for conditions this
// way, never by sleeping for an order of events.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if _, ok := Until(limit, func() (struct{}, bool) { return struct{}{}, cond() }); !ok {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}

// Poll calls f until it reports done and returns the value f returned
// then. If f is not done within limit, the test fails naming what it
// waited for and the last value f returned (formatted with %v, on lines of
// its own if it has several), so that the failure says how far things
// got. f runs on the caller's goroutine and may itself fail the test.
func Poll[T any](t testing.TB, limit time.Duration, what string, f func() (T, bool)) T {
	t.Helper()
	v, ok := Until(limit, f)
	if !ok {
		last := fmt.Sprint(v)
		if strings.Contains(last, "\n") {
			last = "\n" + last
		}
		t.Fatalf("timed out after %v waiting for %s; last seen: %s", limit, what, last)
	}
	return v
}

// Until calls f until it reports done or limit has passed, and returns
// the last value f returned and whether it was done. It is Poll for code
// that reports a timeout itself: helpers that return an error, waits whose
// timeout is not a failure, goroutines other than the test's. f is called
// at least once, and once more after limit has passed if the last call
// came before it.
//
// f is called again after 2 ms, or later when it is expensive (a metrics
// scrape, a broker round trip): the pause is nine times the time f took,
// up to 100 ms, so polling takes at most a tenth of a CPU.
func Until[T any](limit time.Duration, f func() (T, bool)) (T, bool) {
	deadline := time.Now().Add(limit)
	for {
		start := time.Now()
		v, done := f()
		if done {
			return v, true
		}
		now := time.Now()
		if !now.Before(deadline) {
			return v, false
		}
		pause := min(max(2*time.Millisecond, 9*now.Sub(start)), 100*time.Millisecond)
		time.Sleep(min(pause, deadline.Sub(now)))
	}
}

// Blocked counts the goroutines of this process that are running fn (a
// function as stack traces name it, e.g. "dgram.(*Receiver).Run") and are
// blocked with the wait reason stack traces print for it ("chan receive",
// "select", "IO wait", "syscall", "sleep", ...). Tests poll it to wait
// until other goroutines are parked where the test needs them, instead of
// sleeping and hoping they got there.
func Blocked(fn, reason string) int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		// "goroutine 7 [chan receive, 2 minutes]:\n" then the frames.
		head, frames, _ := strings.Cut(g, "\n")
		_, state, ok := strings.Cut(head, " [")
		if !ok || !strings.HasPrefix(state, reason) {
			continue
		}
		if rest := state[len(reason):]; rest == "" || (rest[0] != ']' && rest[0] != ',' && rest[0] != ' ') {
			continue
		}
		if strings.Contains(frames, fn+"(") {
			n++
		}
	}
	return n
}
