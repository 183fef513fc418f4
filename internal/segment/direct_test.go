package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lines returns n bytes of whole JSON-ish lines with distinct content.
func lines(rng *rand.Rand, seq *int, n int) []byte {
	var b bytes.Buffer
	for b.Len() < n {
		*seq++
		fmt.Fprintf(&b, "{\"seq\":%d,\"pad\":%q}\n", *seq, bytes.Repeat([]byte{'x'}, rng.IntN(300)))
	}
	return b.Bytes()
}

// With DirectIO, every batch (below a block, exactly whole blocks, many
// blocks) is in the file, byte for byte, as soon as WriteBuffers returns,
// across a reopen of a file whose last block is partial, across a staging
// buffer given up, and across rotation; no padding or NUL ever shows.
func TestDirectIOAppendsExactlyAndVisibly(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	opts := Options{Path: out, DirectIO: true, Fsync: FsyncPolicy{Mode: FsyncInterval, Interval: time.Hour}}
	l, err := Open(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if on, err := l.DirectIO(); !on {
		t.Skipf("filesystem of %s refuses O_DIRECT: %v", dir, err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seq := 0
	var want bytes.Buffer
	sizes := []int{10, 100, 4000, 4096, 8192, 1, 70000, 300, 1 << 20, 5000}
	for round := 0; round < 3; round++ {
		for _, n := range sizes {
			data := lines(rng, &seq, n)
			// Several buffers per call, as the pipeline writer passes them.
			cut := len(data) / 2
			for cut < len(data) && data[cut-1] != '\n' {
				cut++
			}
			got, err := l.WriteBuffers([][]byte{data[:cut], data[cut:]})
			if err != nil || got != int64(len(data)) {
				t.Fatalf("WriteBuffers(%d) = %d, %v", len(data), got, err)
			}
			want.Write(data)
			if n == 1<<20 {
				// The stage grew to this write; given up (the pipeline
				// writer's idle tick), it keeps the carry for the next.
				if s := l.Staged(); s <= 1<<20 {
					t.Fatalf("staged %d bytes after a write of %d", s, len(data))
				}
				l.Unstage()
				if s := l.Staged(); s > directMin+directBlock {
					t.Fatalf("staged %d bytes after Unstage, want at most %d", s, directMin+directBlock)
				}
			}
			file, _ := os.ReadFile(out)
			if !bytes.Equal(file, want.Bytes()) {
				t.Fatalf("round %d, after %d bytes: file has %d bytes, want %d (first difference at %d)",
					round, len(data), len(file), want.Len(), firstDiff(file, want.Bytes()))
			}
		}
		// Reopen (as SIGHUP does) with a partial last block: the carry is
		// read back from the file.
		if err := l.Reopen(); err != nil {
			t.Fatal(err)
		}
		if on, err := l.DirectIO(); !on {
			t.Fatalf("direct I/O lost on reopen: %v", err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A new Log on the same file appends after it.
	l, err = Open(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := lines(rng, &seq, 9000)
	if _, err := l.WriteBuffers([][]byte{data}); err != nil {
		t.Fatal(err)
	}
	want.Write(data)
	l.Close()
	if file, _ := os.ReadFile(out); !bytes.Equal(file, want.Bytes()) {
		t.Fatalf("after reopening the file: %d bytes, want %d", len(file), want.Len())
	}
}

// A failing direct write falls back to buffered writes without losing or
// repeating a byte, and DirectIO then reports why.
func TestDirectIOFallsBackOnWriteError(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.jsonl")
	l, err := Open(Options{Path: out, DirectIO: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if on, err := l.DirectIO(); !on {
		t.Skipf("O_DIRECT refused: %v", err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	seq := 0
	first := lines(rng, &seq, 6000)
	if _, err := l.WriteBuffers([][]byte{first}); err != nil {
		t.Fatal(err)
	}
	// Swap the direct fd for a read-only one: the next pwrite fails EBADF.
	ro, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	l.direct.f.Close()
	l.direct.f = ro
	second := lines(rng, &seq, 200_000) // above directMin: a direct write
	n, err := l.WriteBuffers([][]byte{second[:7], second[7:]})
	if err != nil || n != int64(len(second)) {
		t.Fatalf("WriteBuffers after a failed direct write = %d, %v; want %d, nil", n, err, len(second))
	}
	if on, why := l.DirectIO(); on || why == nil {
		t.Fatalf("DirectIO() = %v, %v; want off with a reason", on, why)
	}
	l.Close()
	file, _ := os.ReadFile(out)
	if want := append(first, second...); !bytes.Equal(file, want) {
		t.Fatalf("file has %d bytes, want %d (first difference at %d)", len(file), len(want), firstDiff(file, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A direct write never covers a block the page cache holds: the carried
// partial block is completed through the cache and the direct write starts
// at the block after it. Were it to cover the block, the kernel would write
// the dirty page back, wait for the device, and drop it from the cache
// (as mincore would show) before every direct write.
func TestDirectWriteStartsAfterTheCarriedBlock(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	l, err := Open(Options{Path: out, DirectIO: true, Fsync: FsyncPolicy{Mode: FsyncInterval, Interval: time.Hour}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if on, err := l.DirectIO(); !on {
		t.Skipf("filesystem of %s refuses O_DIRECT: %v", dir, err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	seq := 0
	var want bytes.Buffer
	for _, n := range []int{1000, 256 << 10} { // a carry, then a direct write
		data := lines(rng, &seq, n)
		if got, err := l.WriteBuffers([][]byte{data}); err != nil || got != int64(len(data)) {
			t.Fatalf("WriteBuffers(%d) = %d, %v", len(data), got, err)
		}
		want.Write(data)
	}
	resident := residentBlocks(t, out)
	if !resident[0] {
		t.Fatalf("the carried block was dropped from the page cache: a direct write covered it")
	}
	direct := 0
	for _, r := range resident[1 : len(resident)-1] {
		if !r {
			direct++
		}
	}
	if direct == 0 {
		t.Fatalf("every block is in the page cache: nothing was written direct (%d blocks)", len(resident))
	}
	if file, _ := os.ReadFile(out); !bytes.Equal(file, want.Bytes()) {
		t.Fatalf("file has %d bytes, want %d (first difference at %d)", len(file), want.Len(), firstDiff(file, want.Bytes()))
	}
}

// residentBlocks reports, per page of path, whether the page cache holds it.
func residentBlocks(t *testing.T, path string) []bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal("mincore:", e)
	}
	res := make([]bool, len(vec))
	for i, v := range vec {
		res[i] = v&1 != 0
	}
	return res
}
