package testenv

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestPollReturnsTheValueThatWasDone(t *testing.T) {
	n := 0
	got := Poll(t, 10*time.Second, "the third call", func() (int, bool) { n++; return n, n == 3 })
	if got != 3 {
		t.Fatalf("Poll returned %d, want 3", got)
	}
}

func TestPollFailureNamesTheLastValue(t *testing.T) {
	tb := &fatalTB{TB: t}
	n := 0
	Poll(tb, 20*time.Millisecond, "a count of -1", func() (int, bool) { n++; return n, false })
	want := fmt.Sprintf("waiting for a count of -1; last seen: %d", n)
	if !strings.Contains(tb.msg, want) {
		t.Fatalf("failure %q does not contain %q", tb.msg, want)
	}
}

func TestUntilCallsOnceMoreAtTheLimit(t *testing.T) {
	start := time.Now()
	var last time.Time
	_, ok := Until(30*time.Millisecond, func() (struct{}, bool) { last = time.Now(); return struct{}{}, false })
	if ok {
		t.Fatal("Until reported done")
	}
	if last.Sub(start) < 30*time.Millisecond {
		t.Fatalf("last call %v after the start, want one at or after the 30ms limit", last.Sub(start))
	}
}

func TestUntilPausesLongerForExpensiveChecks(t *testing.T) {
	calls := 0
	Until(300*time.Millisecond, func() (struct{}, bool) {
		calls++
		time.Sleep(10 * time.Millisecond)
		return struct{}{}, false
	})
	// Each call costs 10 ms and is followed by a 90 ms pause: about 4
	// calls in 300 ms, where a fixed 2 ms pause would allow 25.
	if calls > 8 {
		t.Fatalf("%d calls of a 10ms check in 300ms; want the pause to grow with its cost", calls)
	}
}

func TestEventuallyFailsNamingWhat(t *testing.T) {
	tb := &fatalTB{TB: t}
	Eventually(tb, 10*time.Millisecond, "never", func() bool { return false })
	if !strings.Contains(tb.msg, "waiting for never") {
		t.Fatalf("failure %q does not name what it waited for", tb.msg)
	}
}

func TestBlockedSeesAGoroutineWaitingOnAChannel(t *testing.T) {
	ch := make(chan struct{})
	go parkOn(ch)
	go parkOn(ch)
	Eventually(t, 10*time.Second, "two parkOn blocked in chan receive", func() bool {
		return Blocked("testenv.parkOn", "chan receive") == 2
	})
	if n := Blocked("testenv.parkOn", "select"); n != 0 {
		t.Errorf("Blocked counts %d goroutines in chan receive as in select", n)
	}
	close(ch)
	Eventually(t, 10*time.Second, "parkOn gone", func() bool { return Blocked("testenv.parkOn", "chan receive") == 0 })
}

func parkOn(ch chan struct{}) { <-ch }
