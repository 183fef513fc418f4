package transport

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCountOpenFDs(t *testing.T) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n, err := CountOpenFDs()
	if err != nil {
		t.Fatal(err)
	}
	// ReadDir's own descriptor is listed by it, ours is not counted.
	if n != len(ents)-1 {
		t.Errorf("CountOpenFDs %d, /proc/self/fd lists %d (one of them ReadDir's)", n, len(ents))
	}
}

// lowerFDLimit sets the soft RLIMIT_NOFILE to open+room for the test.
func lowerFDLimit(t *testing.T, room int) {
	t.Helper()
	var orig unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	n, err := CountOpenFDs()
	if err != nil {
		t.Fatal(err)
	}
	lim := orig
	lim.Cur = uint64(n + room)
	if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Prlimit(0, unix.RLIMIT_NOFILE, &orig, nil) })
}

// The gate gives connections what the limit holds less the reserve, takes
// back what they release, and counts again when the kernel says EMFILE or
// the limit changed.
func TestFDGate(t *testing.T) {
	const reserve = 8
	lowerFDLimit(t, reserve+3)
	g, err := NewFDGate(reserve)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !g.Acquire(1) {
			t.Fatalf("acquisition %d of 3 refused (open %d, limit %d)", i+1, g.Open(), g.Limit())
		}
	}
	if g.Acquire(1) {
		t.Fatal("a fourth acquisition ate into the reserve")
	}
	freed := g.Freed()
	g.Refund(1)
	select {
	case <-freed:
	default:
		t.Error("Refund did not wake a waiter")
	}
	if !g.Acquire(1) {
		t.Fatal("refused after a refund")
	}

	// Descriptors opened behind the gate's back: accept's fd number
	// says at least that many are open.
	g.Commit(3, -1) // the three opened
	g.Release(3)    // and closed again
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	g.Commit(0, fd+2)
	if g.Open() < fd+3 {
		t.Errorf("open %d after fd %d was committed", g.Open(), fd+2)
	}

	// EMFILE: counted again at the next Acquire.
	g.Exhausted()
	if !g.Acquire(1) {
		t.Errorf("refused after a recount with room (open %d, limit %d)", g.Open(), g.Limit())
	}
	g.Refund(1)

	// A limit raised while listeners wait counts at the next count.
	lowerFDLimit(t, reserve+100)
	g.Recount()
	if !g.Acquire(50) {
		t.Errorf("the raised limit was not taken (limit %d)", g.Limit())
	}
}
