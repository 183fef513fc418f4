package shmring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"
)

func pair(t testing.TB, c Config) (*Reader, *Writer) {
	t.Helper()
	r, err := Create(c)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(r.FD())
	if err != nil {
		t.Fatal(err)
	}
	r.DropFD()
	t.Cleanup(func() { w.Close(); r.Close() })
	return r, w
}

func payload(i int) []byte {
	n := (i * 7919) % 1500
	b := fmt.Appendf(nil, "rec-%d-", i)
	for len(b) < n {
		b = append(b, byte('a'+i%26))
	}
	return b
}

// Frames of many sizes cross the wrap point of a small ring, with the
// writer blocking on a full ring: each arrives once, in order, intact.
func TestRoundTripWrapAndBackpressure(t *testing.T) {
	r, w := pair(t, Config{Size: MinSize, Spin: 50})
	const n = 20000
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := w.Write(payload(i)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for got < n {
		_, err := r.Poll(func(f []byte) {
			if want := payload(got); !bytes.Equal(f, want) {
				t.Fatalf("frame %d: got %q want %q", got, f, want)
			}
			got++
		})
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d frames", got, n)
		}
		if got%1000 == 0 {
			time.Sleep(time.Millisecond) // a slow reader: the writer must wait, not drop
		}
		r.Wait(nil)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestTooLargeIsRefused(t *testing.T) {
	r, w := pair(t, Config{Size: MinSize, MaxFrame: 100})
	if err := w.Write(make([]byte, 101)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if err := w.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	n, err := r.Poll(func(f []byte) {
		if len(f) != 100 {
			t.Fatalf("len %d", len(f))
		}
	})
	if n != 1 || err != nil {
		t.Fatalf("n=%d err=%v", n, err)
	}
}

// A frame whose bytes are in the ring but whose tail was never published
// (the producer died between copy and commit) is invisible.
func TestUnpublishedFrameIsInvisible(t *testing.T) {
	r, w := pair(t, Config{Size: MinSize})
	if err := w.Write([]byte("complete")); err != nil {
		t.Fatal(err)
	}
	// Simulate a kill mid-write: copy a frame, never store the tail.
	pos := w.tail & w.mask
	binary.LittleEndian.PutUint32(w.data[pos:], 5)
	copy(w.data[pos+frameHdr:], "torn!")
	var frames []string
	if _, err := r.Poll(func(f []byte) { frames = append(frames, string(f)) }); err != nil {
		t.Fatal(err)
	}
	if len(frames) != 1 || frames[0] != "complete" || r.Pending() {
		t.Fatalf("frames %q pending %v", frames, r.Pending())
	}
}

// A hostile producer can write anything in the shared memory: the reader
// reports ErrCorrupt and never panics or reads out of bounds.
func TestCorruptRingNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		r, w := pair(t, Config{Size: MinSize})
		rng.Read(w.data[:64])
		if i%2 == 0 {
			binary.LittleEndian.PutUint32(w.data, uint32(rng.Intn(2*MinSize)))
		}
		atomic.StoreUint64(w.tailp, uint64(rng.Intn(3*MinSize)))
		_, err := r.Poll(func([]byte) {})
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("unexpected error %v", err)
		}
		w.Close()
		r.Close()
	}
	r, w := pair(t, Config{Size: MinSize})
	binary.LittleEndian.PutUint32(w.data, MinSize) // longer than the ring
	atomic.StoreUint64(w.tailp, 64)
	if _, err := r.Poll(func([]byte) {}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
}

// MarkClosed releases a writer blocked on a full ring with ErrClosed.
func TestMarkClosedUnblocksFullWriter(t *testing.T) {
	r, w := pair(t, Config{Size: MinSize, Spin: 10})
	errc := make(chan error, 1)
	go func() {
		for {
			if err := w.Write(make([]byte, 500)); err != nil {
				errc <- err
				return
			}
		}
	}()
	// wait until the writer sleeps on the full ring
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadUint32(r.wwaiting) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("writer never waited for space")
		}
		time.Sleep(time.Millisecond)
	}
	r.MarkClosed()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writer still blocked after MarkClosed")
	}
}

// A sleeping reader is woken by the writer (no lost wake-up): many rounds
// of one frame each, with the reader sleeping in between.
func TestReaderWakeups(t *testing.T) {
	r, w := pair(t, Config{Size: MinSize, Spin: -1})
	const rounds = 300
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		for i := 0; i < rounds; i++ {
			if i%10 == 0 {
				time.Sleep(200 * time.Microsecond)
			}
			w.Write([]byte{byte(i)})
		}
	}()
	got := 0
	start := time.Now()
	for got < rounds {
		r.Poll(func(f []byte) {
			if f[0] != byte(got) {
				t.Fatalf("frame %d has %d", got, f[0])
			}
			got++
		})
		r.Wait(nil)
		if time.Since(start) > 30*time.Second {
			t.Fatalf("stuck at %d", got)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"4096": 4096, "64KiB": 64 << 10, "4MiB": 4 << 20, "1g": 1 << 30, "2 MB": 2 << 20} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "4QB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
	if _, err := Create(Config{Size: 5000}); err == nil {
		t.Error("non power of two size accepted")
	}
}
