package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bytesize"
)

const (
	magic      = "LGSHMRG2"
	version    = 2
	headerSize = 4096

	offVersion  = 8
	offHdrSize  = 12
	offDataSize = 16
	offMaxFrame = 24

	offTail     = 128
	offHead     = 256
	offRSleep   = 384
	offWWaiting = 512
	offClosed   = 640

	frameHdr   = 4
	padMarker  = 0xFFFFFFFF
	frameAlign = 8

	// DefaultSize is the data area size when none is configured.
	DefaultSize = 4 << 20
	// MinSize and MaxSize bound the data area.
	MinSize = 4 << 10
	MaxSize = 1 << 30
	// DefaultSpin is how many polls of the shared index a side makes
	// before it sleeps on the futex (a few microseconds of spinning).
	DefaultSpin = 2000

	// sleepSlice bounds each futex sleep so that flags set without a wake
	// (peer death, shutdown) are seen promptly.
	sleepSlice = 50 * time.Millisecond
	// readerSleep bounds a reader's sleep; it is woken explicitly (publish,
	// Wake), so this only limits the cost of a lost wake-up.
	readerSleep = 500 * time.Millisecond

	// futex(2) operations, without FUTEX_PRIVATE_FLAG: cross-process.
	futexOpWait = 0
	futexOpWake = 1
)

var (
	// ErrClosed is returned by Writer.Write once the reader stopped taking
	// frames (aggregator shut down or died) or the Writer was closed.
	ErrClosed = errors.New("shmring: ring closed")
	// ErrTooLarge is returned by Writer.Write for a frame larger than
	// MaxFrame. The frame is refused, never truncated.
	ErrTooLarge = errors.New("shmring: frame larger than the ring's max frame")
	// ErrCorrupt is returned by Reader.Poll when the shared memory breaks
	// the layout (a buggy or hostile producer). The ring must be dropped.
	ErrCorrupt = errors.New("shmring: corrupt ring")
	// ErrBadRing is returned by Dial/NewWriter for a mapping that is not a ring.
	ErrBadRing = errors.New("shmring: not a valid ring")
	// ErrTimeout is returned by Writer.WaitReleased when its time ran out.
	ErrTimeout = errors.New("shmring: frames not released in time")
)

// Config describes a ring. The zero value means the defaults.
type Config struct {
	Size     int // data area bytes, power of two in [MinSize, MaxSize]; 0 = DefaultSize
	Spin     int // polls before sleeping; 0 = DefaultSpin, <0 = never spin
	MaxFrame int // largest payload a writer may put in one frame; 0 or too big = Size-8
}

func (c Config) withDefaults() (Config, error) {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Size < MinSize || c.Size > MaxSize || c.Size&(c.Size-1) != 0 {
		return c, fmt.Errorf("shmring: size %d must be a power of two between %d and %d", c.Size, MinSize, MaxSize)
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.Spin < 0 {
		c.Spin = 0
	}
	if limit := c.Size - frameHdr - frameAlign; c.MaxFrame <= 0 || c.MaxFrame > limit {
		c.MaxFrame = limit
	}
	return c, nil
}

// MappedSize is the bytes a ring of c maps: its header and data area (c
// as Create would complete it).
func MappedSize(c Config) int {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	return headerSize + c.Size
}

// ParseSize parses a ring size such as "4096", "64KiB", "4MiB" or "1G"
// (bytesize.Parse: K and KiB are 1024, KB is 1000); Create checks that it
// is a power of two in range.
func ParseSize(s string) (int, error) {
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

func align8(n uint64) uint64 { return (n + frameAlign - 1) &^ (frameAlign - 1) }

func u64(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
func u32(mem []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }

// writeHeader initialises a fresh mapping.
func writeHeader(mem []byte, c Config) {
	copy(mem, magic)
	binary.LittleEndian.PutUint32(mem[offVersion:], version)
	binary.LittleEndian.PutUint32(mem[offHdrSize:], headerSize)
	binary.LittleEndian.PutUint64(mem[offDataSize:], uint64(c.Size))
	binary.LittleEndian.PutUint32(mem[offMaxFrame:], uint32(c.MaxFrame))
}

// checkHeader validates a mapping received from the aggregator and returns
// its data size and max frame.
func checkHeader(mem []byte) (size, maxFrame int, err error) {
	if len(mem) < headerSize || string(mem[:8]) != magic {
		return 0, 0, fmt.Errorf("%w: bad magic", ErrBadRing)
	}
	if v := binary.LittleEndian.Uint32(mem[offVersion:]); v != version {
		return 0, 0, fmt.Errorf("%w: version %d, want %d", ErrBadRing, v, version)
	}
	size = int(binary.LittleEndian.Uint64(mem[offDataSize:]))
	maxFrame = int(binary.LittleEndian.Uint32(mem[offMaxFrame:]))
	if binary.LittleEndian.Uint32(mem[offHdrSize:]) != headerSize || size < MinSize || size > MaxSize ||
		size&(size-1) != 0 || len(mem) != headerSize+size || maxFrame <= 0 || maxFrame > size-frameHdr-frameAlign {
		return 0, 0, fmt.Errorf("%w: inconsistent sizes (mapping %d, data %d, max frame %d)", ErrBadRing, len(mem), size, maxFrame)
	}
	return size, maxFrame, nil
}

// futexWait sleeps while *addr == val, at most d. Shared (non-private)
// futex: the word lives in a MAP_SHARED mapping used by two processes.
// Spurious returns are fine: callers recheck their condition.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	// Syscall (not RawSyscall) so the scheduler can hand off this P while
	// the thread sleeps.
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every waiter on addr.
func futexWake(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, uintptr(1<<30), 0, 0, 0)
}

// wakeIfFlagged clears *flag and wakes its sleeper if it was set. The
// caller has just published the index the sleeper waits for.
func wakeIfFlagged(flag *uint32) bool {
	if atomic.LoadUint32(flag) != 0 && atomic.CompareAndSwapUint32(flag, 1, 0) {
		futexWake(flag)
		return true
	}
	return false
}
