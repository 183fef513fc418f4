package segment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Position is a place in the segment log: byte Offset into segment Seq. The
// position of a line is where the line ends (just after its '\n'), so a
// checkpoint at a position means "everything before it has been shipped".
// The zero Position means "the start of the oldest segment that exists".
type Position struct {
	Seq    uint64 `json:"seq"`
	Offset int64  `json:"offset"`
}

// Less reports whether p comes before q in the log.
func (p Position) Less(q Position) bool {
	return p.Seq < q.Seq || (p.Seq == q.Seq && p.Offset < q.Offset)
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Seq, p.Offset) }

// Errors a Reader returns; test with errors.Is.
var (
	// ErrReaderClosed is returned by Next after Close.
	ErrReaderClosed = errors.New("segment: reader closed")
	// ErrBadPosition means a start position lies beyond the end of its
	// segment: the log was truncated or replaced behind the checkpoint.
	ErrBadPosition = errors.New("segment: position beyond end of segment")
)

// ReaderConfig configures a Reader. The zero value of every field but
// Output has a usable default.
type ReaderConfig struct {
	// Output is the writer's --output path (the active segment).
	Output string
	// Start is where reading begins (usually a loaded checkpoint). The zero
	// Position starts at the oldest segment that exists.
	Start Position
	// Poll is how often the reader looks for new data or a rotation at the
	// end of the active segment (default 20ms). Wake cuts the wait short.
	Poll time.Duration
	// MaxLine is the longest line returned (default 16 MiB). Longer lines
	// cannot have been written by our encoder; they are skipped whole and
	// counted in ReaderStats.OversizeLines.
	MaxLine int
	// OnSegment, if set, is called by Next (in Next's goroutine, before
	// the first line of the segment is returned) each time the reader
	// enters a segment, with the position it starts reading at. A
	// forwarder uses it to checkpoint past a finished segment before any
	// line of the next one exists.
	OnSegment func(Position)
}

// ReaderStats counts what the reader skipped. None of it happens when the
// writer and retention keep their contracts; each is a sign of a crash or of
// someone editing the log by hand, and forwarders export them as metrics.
type ReaderStats struct {
	// MissingSegments counts segments that were gone when the reader
	// needed them (deleted behind its back); reading went on with the next.
	MissingSegments uint64
	// TornTails counts rotated segments that ended without '\n' (the writer
	// crashed mid-line); TornBytes is the size of those incomplete tails.
	TornTails, TornBytes uint64
	// OversizeLines counts lines longer than MaxLine, skipped.
	OversizeLines uint64
}

// Reader returns the complete lines of a segment log in order: rotated
// segments in ascending sequence, then the active one, following rotations
// as they happen. A line is complete only once its '\n' is on disk, so a
// record the writer has half written is never returned.
//
// Next and Close must be called from one goroutine (Close after Next has
// returned; cancel Next's context to stop a blocked Next). Wake and Stats
// are safe from any goroutine.
//
// Contract with the writer (naming.go): segment S is written only while it
// is the active file, and all of its bytes are written before it is renamed
// to RotatedName(output, S), so seeing the rotated name means the segment is
// complete.
type Reader struct {
	cfg    ReaderConfig
	seq    uint64
	off    int64 // file offset of buf[start]
	f      *os.File
	active bool // f is the active file, not yet seen renamed
	buf    []byte
	start  int  // first unconsumed byte in buf
	end    int  // end of valid data in buf
	skip   bool // discarding an oversize line up to its '\n'
	closed bool
	wake   chan struct{}

	missing, tornTails, tornBytes, oversize atomic.Uint64
}

// NewReader validates cfg and returns a Reader positioned at cfg.Start. It
// does no I/O: the first segment is opened by the first Next, so a reader
// may be created before the writer has produced anything.
func NewReader(cfg ReaderConfig) (*Reader, error) {
	if cfg.Output == "" {
		return nil, errors.New("segment: ReaderConfig.Output is empty")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 16 << 20
	}
	if cfg.Start.Offset < 0 {
		return nil, fmt.Errorf("segment: ReaderConfig.Start.Offset %d is negative", cfg.Start.Offset)
	}
	size := 256 << 10
	if size > cfg.MaxLine {
		size = cfg.MaxLine
	}
	return &Reader{
		cfg:  cfg,
		seq:  cfg.Start.Seq,
		off:  cfg.Start.Offset,
		buf:  make([]byte, size),
		wake: make(chan struct{}, 1),
	}, nil
}

// Wake makes a Next that waits at the end of the active segment look again
// at once. An in-process writer calls it after each write; without it the
// reader notices new data within Poll.
func (r *Reader) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stats returns the counters of skipped data.
func (r *Reader) Stats() ReaderStats {
	return ReaderStats{
		MissingSegments: r.missing.Load(),
		TornTails:       r.tornTails.Load(),
		TornBytes:       r.tornBytes.Load(),
		OversizeLines:   r.oversize.Load(),
	}
}

// Position is where the next line begins: the end of the line Next returned
// last, or the start of the next segment once that one has been entered.
func (r *Reader) Position() Position {
	return Position{Seq: r.seq, Offset: r.off + int64(r.start)}
}

// Close releases the open segment. Next returns ErrReaderClosed afterwards.
func (r *Reader) Close() error {
	r.closed = true
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// Next returns the next complete line, '\n' included, and the position just
// after it. The line aliases the Reader's buffer and is valid until the next
// call. At the end of the active segment Next waits for more data or a
// rotation; it returns ctx.Err() (wrapped) when ctx ends, and any I/O error.
func (r *Reader) Next(ctx context.Context) ([]byte, Position, error) {
	for {
		if r.closed {
			return nil, Position{}, ErrReaderClosed
		}
		if line, ok := r.scan(); ok {
			return line, r.Position(), nil
		}
		if r.f == nil {
			ok, err := r.open()
			if err != nil {
				return nil, Position{}, err
			}
			if !ok {
				if err := r.sleep(ctx); err != nil {
					return nil, Position{}, err
				}
			}
			continue
		}
		n, err := r.fill()
		if err != nil {
			return nil, Position{}, err
		}
		if n > 0 {
			continue
		}
		// End of file. A rotated segment is finished; the active one is
		// finished only once it has been renamed, and then one more read
		// collects whatever was written before the rename.
		if r.active {
			rotated, err := r.renamed()
			if err != nil {
				return nil, Position{}, err
			}
			if !rotated {
				if err := r.sleep(ctx); err != nil {
					return nil, Position{}, err
				}
				continue
			}
			r.active = false
			continue
		}
		r.finishSegment()
	}
}

// scan takes one complete line out of the buffer.
func (r *Reader) scan() ([]byte, bool) {
	for r.start < r.end {
		i := bytes.IndexByte(r.buf[r.start:r.end], '\n')
		if i < 0 {
			return nil, false
		}
		line := r.buf[r.start : r.start+i+1]
		r.start += i + 1
		if r.skip {
			r.skip = false
			continue
		}
		return line, true
	}
	return nil, false
}

// fill reads more of the segment into the buffer, making room first.
func (r *Reader) fill() (int, error) {
	if r.start > 0 {
		copy(r.buf, r.buf[r.start:r.end])
		r.off += int64(r.start)
		r.end -= r.start
		r.start = 0
	}
	if r.end == len(r.buf) {
		if len(r.buf) < r.cfg.MaxLine {
			nb := make([]byte, min(2*len(r.buf), r.cfg.MaxLine))
			copy(nb, r.buf[:r.end])
			r.buf = nb
		} else {
			// A line longer than MaxLine: drop what we have and the rest
			// of the line up to its '\n'.
			if !r.skip {
				r.oversize.Add(1)
			}
			r.skip = true
			r.off += int64(r.end)
			r.end = 0
		}
	}
	n, err := r.f.Read(r.buf[r.end:])
	r.end += n
	if err != nil && !errors.Is(err, io.EOF) {
		return n, fmt.Errorf("segment: read %s segment %d: %w", r.cfg.Output, r.seq, err)
	}
	return n, nil
}

// finishSegment moves from a completely read rotated segment to the next.
func (r *Reader) finishSegment() {
	if tail := r.end - r.start; tail > 0 || r.skip {
		r.tornTails.Add(1)
		r.tornBytes.Add(uint64(tail))
	}
	r.f.Close()
	r.f = nil
	r.seq++
	r.off = 0
	r.start, r.end = 0, 0
	r.skip = false
}

// open opens segment r.seq (or the oldest one when r.seq is 0) and seeks to
// r.off. It reports false when the segment does not exist yet (the writer
// has not created it), so the caller waits.
func (r *Reader) open() (bool, error) {
	out := r.cfg.Output
	for attempt := 0; attempt < 100; attempt++ {
		// Opening the active file before listing, and checking afterwards
		// that the name still points to the same inode, proves that the
		// file we hold was the active one while the listing was taken, so
		// the sequence the listing implies is its own.
		af, aerr := os.Open(out)
		if aerr != nil && !errors.Is(aerr, os.ErrNotExist) {
			return false, fmt.Errorf("segment: open %s: %w", out, aerr)
		}
		seqs, err := ListRotated(out)
		if err != nil {
			rdClose(af)
			return false, err
		}
		activeSeq := uint64(1)
		if len(seqs) > 0 {
			activeSeq = seqs[len(seqs)-1] + 1
		}
		if r.seq == 0 {
			r.seq, r.off = activeSeq, 0
			if len(seqs) > 0 {
				r.seq = seqs[0]
			}
		}
		want := r.seq
		if want < activeSeq && !rdHas(seqs, want) {
			// Deleted behind our back: go on with the next one that exists.
			rdClose(af)
			next := activeSeq
			for _, s := range seqs {
				if s > want {
					next = s
					break
				}
			}
			r.missing.Add(next - want)
			r.seq, r.off = next, 0
			continue
		}
		if want < activeSeq {
			rdClose(af)
			f, err := os.Open(RotatedName(out, want))
			if errors.Is(err, os.ErrNotExist) {
				continue // deleted between listing and open; list again
			}
			if err != nil {
				return false, fmt.Errorf("segment: open segment %d: %w", want, err)
			}
			return true, r.use(f, false)
		}
		if want > activeSeq || af == nil {
			rdClose(af)
			return false, nil // not written yet
		}
		same, err := rdSameFile(af, out)
		if err != nil {
			af.Close()
			return false, err
		}
		if !same {
			af.Close()
			continue // rotated while we looked; look again
		}
		return true, r.use(af, true)
	}
	return false, fmt.Errorf("segment: %s rotates too fast to open segment %d", out, r.seq)
}

func (r *Reader) use(f *os.File, active bool) error {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("segment: stat segment %d: %w", r.seq, err)
	}
	if st.Size() < r.off {
		f.Close()
		return fmt.Errorf("%w: segment %d of %s has %d bytes, position %d", ErrBadPosition, r.seq, r.cfg.Output, st.Size(), r.off)
	}
	if _, err := f.Seek(r.off, io.SeekStart); err != nil {
		f.Close()
		return fmt.Errorf("segment: seek segment %d: %w", r.seq, err)
	}
	r.f, r.active = f, active
	r.start, r.end = 0, 0
	if r.cfg.OnSegment != nil {
		r.cfg.OnSegment(Position{Seq: r.seq, Offset: r.off})
	}
	return nil
}

// renamed reports whether the active file we hold has been rotated: the
// output path no longer names it. The writer renames it (atomically) to
// RotatedName(output, seq) and may already have deleted it, but the file we
// hold open stays readable to its end either way.
func (r *Reader) renamed() (bool, error) {
	same, err := rdSameFile(r.f, r.cfg.Output)
	return !same, err
}

func (r *Reader) sleep(ctx context.Context) error {
	t := time.NewTimer(r.cfg.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("segment: reader: %w", ctx.Err())
	case <-r.wake:
	case <-t.C:
	}
	return nil
}

func rdSameFile(f *os.File, path string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("segment: stat %s: %w", path, err)
	}
	b, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("segment: stat %s: %w", path, err)
	}
	return os.SameFile(a, b), nil
}

func rdHas(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func rdClose(f *os.File) {
	if f != nil {
		f.Close()
	}
}
