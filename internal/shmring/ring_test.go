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

	"github.com/ipclab/logagg/internal/testenv"
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
	testenv.Eventually(t, 10*time.Second, "the writer to sleep on the full ring", func() bool {
		return atomic.LoadUint32(r.wwaiting) != 0
	})
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
				// the reader goes to sleep (the test fails below if it
				// never wakes)
				testenv.Until(10*time.Second, func() (struct{}, bool) { return struct{}{}, atomic.LoadUint32(r.rsleep) == 1 })
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
	for in, want := range map[string]int{"4096": 4096, "64KiB": 64 << 10, "4MiB": 4 << 20, "1g": 1 << 30, "2 MiB": 2 << 20} {
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
	// 64kb is 64000 (bytesize: KB is decimal), which no ring can be.
	if n, err := ParseSize("64kb"); err != nil || n != 64000 {
		t.Errorf("ParseSize(64kb) = %d, %v; want 64000", n, err)
	}
	if _, err := Create(Config{Size: 5000}); err == nil {
		t.Error("non power of two size accepted")
	}
}

// With manual release, frames the reader read stay the writer's until
// Release: the writer waits for space although everything was read, a
// second reader's view (Unreleased) still holds every frame not released,
// in order and across the wrap, and Release wakes a writer waiting for
// space and for WaitReleased.
func TestManualReleaseKeepsFramesUntilReleased(t *testing.T) {
	r, w := pair(t, Config{Size: MinSize, Spin: 10})
	r.SetManualRelease(true)
	frame := func(i int) []byte { return fmt.Appendf(nil, "frame-%03d-%s", i, bytes.Repeat([]byte{'x'}, 200)) }
	// 4 KiB holds 18 frames of 216 bytes (210 + length, aligned); write them and read all.
	next := 0
	for ; next < 18; next++ {
		if err := w.Write(frame(next)); err != nil {
			t.Fatal(err)
		}
	}
	read := 0
	if _, err := r.Poll(func(f []byte) { read++ }); err != nil || read != 18 {
		t.Fatalf("read %d frames (%v), want 18", read, err)
	}
	// Release half of them: the mark of frame 9.
	half := uint64(9 * 216)
	r.Release(half)
	if got := r.Released(); got != half {
		t.Fatalf("Released %d, want %d", got, half)
	}
	var kept []string
	if err := w.Unreleased(func(f []byte) error { kept = append(kept, string(f[:9])); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(kept) != 9 || kept[0] != "frame-009" || kept[8] != "frame-017" {
		t.Fatalf("unreleased frames %v, want frame-009..frame-017", kept)
	}
	// The ring is full of read but unreleased frames: a write of 10 more
	// frames (wrapping) must wait for Release, not overwrite them.
	wrote := make(chan error, 1)
	go func() {
		for i := 18; i < 28; i++ {
			if err := w.Write(frame(i)); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		t.Fatalf("writes into a ring of unreleased frames returned (%v) before the release", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.Release(r.ReadMark())
	for read < 28 {
		if _, err := r.Poll(func(f []byte) {
			if want := frame(read); !bytes.Equal(f, want) {
				t.Fatalf("frame %d: got %.12q", read, f)
			}
			read++
		}); err != nil {
			t.Fatal(err)
		}
		r.Release(r.ReadMark())
		r.Wait(nil)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	if err := w.Write(frame(28)); err != nil {
		t.Fatal(err)
	}
	go func() { released <- w.WaitReleased(5 * time.Second) }()
	for !r.Pending() {
		r.Wait(nil)
	}
	r.Poll(func([]byte) {})
	if !w.Pending() {
		t.Fatal("a frame read but not released is not pending")
	}
	r.Release(r.ReadMark() - 1) // any older mark than one released is ignored; this one is new
	r.Release(r.ReadMark())
	if err := <-released; err != nil {
		t.Fatalf("WaitReleased: %v", err)
	}
	if w.Pending() {
		t.Fatal("pending after release")
	}
	if err := w.WaitReleased(time.Millisecond); err != nil {
		t.Fatalf("WaitReleased with nothing pending: %v", err)
	}
	// An older mark does not move the release cursor back.
	r.Release(1)
	if got, want := r.Released(), r.ReadMark(); got != want {
		t.Fatalf("Released %d after an old mark, want %d", got, want)
	}
	// After Close, Release is harmless.
	r.Close()
	r.Release(r.ReadMark() + 8)
}
