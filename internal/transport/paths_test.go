package transport

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/testenv"
)

// LOGAGG_LOCK_HOLDER=PATH makes the test binary take the lock at PATH,
// print "locked" and wait to be killed: a holder that dies without
// releasing anything.
func TestMain(m *testing.M) {
	if p := os.Getenv("LOGAGG_LOCK_HOLDER"); p != "" {
		if _, err := AcquireLock(p); err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		fmt.Println("locked")
		select {}
	}
	os.Exit(m.Run())
}

func TestLockExcludesAndNamesHolder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	l, err := AcquireLock(p)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want our pid", b)
	}
	_, err = AcquireLock(p)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want ErrInUse naming our pid", err)
	}
	l.Release()
	l.Release() // idempotent
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Release left the lock file: %v", err)
	}
	l2, err := AcquireLock(p)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
}

// A holder killed with SIGKILL leaves its lock file; the kernel dropped its
// flock, so the next instance takes the lock over and writes its own pid.
func TestStaleLockTakenOver(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOGAGG_LOCK_HOLDER="+p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "locked" {
		cmd.Process.Kill()
		t.Fatalf("holder: %q", line)
	}
	_, err = AcquireLock(p)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("while the holder lives: %v, want ErrInUse naming pid %d", err, cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("the killed holder's lock file should still be there: %v", err)
	}
	l, err := AcquireLock(p)
	if err != nil {
		t.Fatalf("stale lock not taken over: %v", err)
	}
	defer l.Release()
	if b, _ := os.ReadFile(p); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want our pid", b)
	}
}

// A symbolic link at the lock path is never followed (it could point at a
// file the aggregator would then create or truncate).
func TestLockRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "x.lock")
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	_, err := AcquireLock(p)
	if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("err = %v, want ErrForeign for a symlink", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("symlink target changed: %q", b)
	}
	// A dangling link must not create its target either.
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	if _, err := AcquireLock(p); !errors.Is(err, ErrForeign) {
		t.Fatalf("dangling link: %v, want ErrForeign", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dangling link's target was created")
	}
}

// Another user's lock file is neither used nor removed.
func TestLockRefusesForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "needs root to give a file to another user")
	}
	p := filepath.Join(t.TempDir(), "x.lock")
	if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := AcquireLock(p)
	if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), "65534") {
		t.Fatalf("err = %v, want ErrForeign naming uid 65534", err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "1\n" {
		t.Errorf("another user's lock file changed: %q %v", b, err)
	}
}

// Release removes only the file it created, and a Claim over a path that
// vanished and reappeared (someone else's socket now) leaves it.
func TestClaimReleaseRemovesOnlyOurs(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.sock")
	c, err := ClaimPath(p, NodeSocket)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := c.ListenUnix(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("closing the socket removed its file before Release: %v", err)
	}
	os.Remove(p)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if _, err := os.Lstat(p); err != nil {
		t.Errorf("Release removed a file it did not create: %v", err)
	}
	if _, err := os.Lstat(p + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Release left the lock file: %v", err)
	}
}

func TestLockDirIsOurs(t *testing.T) {
	d, err := LockDir()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(d, &st); err != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		t.Fatalf("lock dir %s: %+v %v", d, st, err)
	}
}

// An abstract socket name has no file: no lock file, nothing created or
// removed in the working directory, and the kernel itself refuses a
// second bind of the name.
func TestClaimAbstractName(t *testing.T) {
	name := "@logagg-test-" + strconv.Itoa(os.Getpid())
	c, err := ClaimPath(name, NodeSocket)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := c.ListenUnix(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	defer ln.Close()
	if _, err := os.Lstat(name + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a lock file was created for an abstract name: %v", err)
	}
	c2, err := ClaimPath(name, NodeSocket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.ListenUnix(DefaultOptions()); err == nil {
		t.Error("a second bind of an abstract name succeeded")
	}
}
