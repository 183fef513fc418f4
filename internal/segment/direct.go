package segment

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
)

// directBlock is the alignment of O_DIRECT offsets, lengths and buffers.
// 4 KiB satisfies every logical block size up to a page.
const directBlock = 4096

// directMin is the smallest write (in whole blocks) that goes direct.
// Below it the page-cache copy is cheap and a direct write's wait on the
// device would dominate latency; batches grow past it exactly when the
// rate is high enough for the copy to matter.
const directMin = 64 << 10

// directAppender appends to the active segment with O_DIRECT, so the
// records go from our buffer to the device without being copied into the
// page cache. On this VM a first-touch page-cache write runs at ~0.5 GB/s
// (every new page costs the host a fault) against ~2 GB/s for a 1 MiB
// direct write, and the copy was up to two thirds of the aggregator's CPU
// at shm rates. See docs/adr/0015-direct-i-o-output.md.
//
// O_DIRECT writes whole aligned blocks. The file's last partial block (the
// carry) is kept in memory and written through the ordinary buffered fd,
// so every record is in the file as soon as WriteBuffers returns, as
// without direct I/O. The next append completes that block through the
// page cache too and writes directly only from the block after it: a
// direct write over a cached block makes the kernel write the dirty page
// back and wait for it first, which cost a device round trip per write
// and, with the small writes of several outputs sharing the budget, half
// the daemon's records/s (docs/adr/0015-direct-i-o-output.md).
type directAppender struct {
	f     *os.File // the segment opened O_WRONLY|O_DIRECT
	stage []byte   // directBlock-aligned staging buffer
	carry int      // stage[:carry] is the file's last partial block
	base  int64    // file offset of stage[0]; always block-aligned
	mem   *metrics.Memory
	held  int // bytes of the staging allocation, counted in mem
}

// openDirect opens path for direct appends at its current size. It fails
// (and the caller keeps buffered writes) where the filesystem refuses
// O_DIRECT.
func openDirect(path string, size int64, mem *metrics.Memory) (*directAppender, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	d := &directAppender{f: f, base: size - size%directBlock, mem: mem}
	d.grow(directMin)
	d.carry = int(size % directBlock)
	if d.carry > 0 {
		r, err := os.Open(path)
		if err != nil {
			f.Close()
			return nil, err
		}
		_, err = r.ReadAt(d.stage[:d.carry], d.base)
		r.Close()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("read the last block of %s: %w", path, err)
		}
	}
	return d, nil
}

// grow makes the staging buffer hold at least n bytes, keeping the carry.
func (d *directAppender) grow(n int) {
	if len(d.stage) >= n {
		return
	}
	// Whole multiples of directMin, so that writes growing a little at a
	// time do not reallocate every time; the writer bounds what one write
	// gathers, and so the stage.
	n = (n + directMin - 1) &^ (directMin - 1)
	raw := make([]byte, n+directBlock)
	d.mem.Add(metrics.MemDirectIO, int64(len(raw)-d.held))
	d.held = len(raw)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(&raw[0])) % directBlock); rem != 0 {
		off = directBlock - rem
	}
	stage := raw[off : off+n : off+n]
	copy(stage, d.stage[:d.carry])
	d.stage = stage
}

// unstage gives up a staging buffer grown past directMin, keeping the
// carry: the next large append grows it again.
func (d *directAppender) unstage() {
	if len(d.stage) <= directMin {
		return
	}
	old, carry := d.stage, d.carry
	d.stage, d.carry = nil, 0
	d.grow(directMin)
	d.carry = copy(d.stage, old[:carry])
}

// append writes bufs (n bytes in all) at the end of the file: whole blocks
// with O_DIRECT, the rest through buffered, an O_APPEND fd. It returns how
// many of the n bytes are in the file. On a direct-write error nothing is
// lost: the caller writes the bytes not yet in the file (directError.rest)
// through buffered and gives up direct I/O.
func (d *directAppender) append(bufs [][]byte, n int64, buffered *os.File) (int64, error) {
	need := d.carry + int(n)
	d.grow(need)
	off := d.carry
	for _, b := range bufs {
		off += copy(d.stage[off:], b)
	}
	oldEnd := d.carry // bytes of stage already in the file
	// The direct part starts after the carry's block, which is in the page
	// cache already and is completed there.
	head := 0
	if oldEnd > 0 {
		head = min(directBlock, need)
	}
	full := need &^ (directBlock - 1)
	if full-head < directMin {
		// A small write goes through the page cache: a direct write waits
		// for the device (60-90 µs here), which at moderate rates would be
		// most of a record's latency, while copying a few KiB costs little.
		k, err := d.writeBuffered(buffered, oldEnd, need)
		if err == nil {
			d.keep(full, need)
		}
		return int64(k), err
	}
	if k, err := d.writeBuffered(buffered, oldEnd, head); err != nil {
		return int64(k), err
	}
	for done := head; done < full; {
		k, err := unix.Pwrite(int(d.f.Fd()), d.stage[done:full], d.base+int64(done))
		if err == nil && k <= 0 {
			err = io.ErrShortWrite // never spin on a write that makes no progress
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			// The file holds stage[:done]; the rest of this append is
			// handed back for a buffered write.
			return int64(done - oldEnd), &directError{err: err, rest: d.stage[done:need]}
		}
		if k > 0 {
			done += k
		}
	}
	k, err := d.writeBuffered(buffered, full, need)
	if err == nil {
		d.keep(full, need)
	}
	return int64(full-oldEnd) + int64(k), err
}

// writeBuffered writes stage[from:to] through the buffered fd. On an error
// it rebuilds the carry from what the file then holds, so that a retry
// appends the rest after it.
func (d *directAppender) writeBuffered(buffered *os.File, from, to int) (int, error) {
	k, err := writeAll(buffered, d.stage[from:to])
	if err != nil {
		end := from + k
		d.keep(end&^(directBlock-1), end)
	}
	return k, err
}

// keep makes stage[full:end] (the file's new last partial block) the carry.
func (d *directAppender) keep(full, end int) {
	copy(d.stage, d.stage[full:end])
	d.carry = end - full
	d.base += int64(full)
}

func (d *directAppender) close() error {
	d.mem.Add(metrics.MemDirectIO, -int64(d.held))
	d.held = 0
	return d.f.Close()
}

// directError marks a failed O_DIRECT write, after which the log falls back
// to buffered writes, starting with rest: the bytes of the failed append
// that are not in the file.
type directError struct {
	err  error
	rest []byte
}

func (e *directError) Error() string { return "direct write: " + e.err.Error() }
func (e *directError) Unwrap() error { return e.err }

func writeAll(f *os.File, b []byte) (int, error) {
	total := 0
	for len(b) > 0 {
		k, err := unix.Write(int(f.Fd()), b)
		if k > 0 {
			total += k
			b = b[k:]
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return total, err
		}
	}
	return total, nil
}
