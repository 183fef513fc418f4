package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The journal export format (what `journalctl -o export` writes, and
// systemd-journal-remote reads; systemd's JOURNAL_EXPORT_FORMATS):
//
//	entry  = *field "\n"
//	field  = NAME "=" VALUE "\n"                    ; VALUE holds no "\n"
//	       | NAME "\n" LEN64LE BYTES "\n"           ; anything else
//
// NAME never holds "=" or "\n". journalctl writes the address fields
// first (__CURSOR, __REALTIME_TIMESTAMP, __MONOTONIC_TIMESTAMP, _BOOT_ID,
// and __SEQNUM, __SEQNUM_ID from systemd 254), then the entry's data
// fields in the order the journal holds them; a field may repeat.

// ErrMalformed is returned by Decoder.Next for input that is not the
// export format. The decoder stops there: what follows cannot be framed.
var ErrMalformed = errors.New("journal: malformed export data")

// Field is one field of an entry. Name and Value point into the decoder's
// buffer and are valid until the next call of Next.
type Field struct {
	Name, Value []byte
	// Binary says the field came in the length-prefixed form: its value
	// holds a newline or bytes journalctl does not print as text.
	Binary bool
	// Truncated says Value is the first MaxValue bytes of a longer value;
	// the rest was read and skipped.
	Truncated bool
}

// Entry is one decoded entry.
type Entry struct {
	Fields []Field
	// Size is the number of bytes of export format the entry took,
	// its final blank line included.
	Size int
	// Truncated says a value was cut (Field.Truncated) or fields past
	// MaxEntry were left out.
	Truncated bool
}

// Limits of a Decoder.
const (
	// MaxName is the longest field name accepted. journald allows 64
	// bytes; what is longer is not the export format.
	MaxName = 256
	// DefaultMaxValue and DefaultMaxEntry are the limits of a Decoder
	// whose limits are not set.
	DefaultMaxValue = 256 << 10
	DefaultMaxEntry = 1 << 20
	// readSize is what one read asks for at least.
	readSize = 64 << 10
	// giveBackAfter: a buffer grown for large entries is given back (a
	// new one of readSize taken) once this many entries in a row fitted
	// in half of readSize. A run of large entries keeps it, so they cost
	// no allocation each; one large entry does not hold it for good.
	giveBackAfter = 64
)

// fieldOff is a field's place in the entry, relative to its first byte
// (buf[rd]), so that moving the entry to the front of the buffer keeps
// them valid.
type fieldOff struct {
	name, nameEnd, val, valEnd int
	binary, truncated          bool
}

// Decoder reads entries in the export format from a stream. It holds at
// most about MaxEntry+MaxValue+128 KiB of it, whatever the input: longer
// values are cut to MaxValue bytes (the rest is read and skipped), and
// fields past MaxEntry bytes of an entry are read and skipped, both
// flagged in the Entry. It allocates nothing once its buffer has grown to
// the largest entry seen, and gives it back once entries are small again
// (giveBackAfter). Not safe for concurrent use.
type Decoder struct {
	// MaxValue is the most bytes of one value kept (0: DefaultMaxValue);
	// MaxEntry the most bytes of names and values kept per entry (0:
	// DefaultMaxEntry). Set them before the first Next.
	MaxValue, MaxEntry int

	r      io.Reader
	buf    []byte
	rd, wr int // buf[rd:wr] is read and not yet consumed; rd is the entry's start
	err    error
	offs   []fieldOff
	ent    Entry
	// dropped counts bytes of the current entry that were read and taken
	// out of the buffer (skipped parts of long values, fields past
	// MaxEntry): the entry's Size counts them.
	dropped int
	// small counts the entries in a row that fitted in half of readSize.
	small int
}

// NewDecoder returns a Decoder reading r.
func NewDecoder(r io.Reader) *Decoder { return &Decoder{r: r} }

// Held is the capacity of the decoder's buffer: the largest recent entry
// decides it (counted with the read buffers).
func (d *Decoder) Held() int { return cap(d.buf) }

// Buffered is the number of bytes read from the stream and not yet
// decoded.
func (d *Decoder) Buffered() int { return d.wr - d.rd }

func (d *Decoder) limits() (maxValue, maxEntry int) {
	maxValue, maxEntry = d.MaxValue, d.MaxEntry
	if maxValue <= 0 {
		maxValue = DefaultMaxValue
	}
	if maxEntry <= 0 {
		maxEntry = DefaultMaxEntry
	}
	return min(maxValue, maxEntry), maxEntry
}

// avail is the number of bytes of the entry in the buffer.
func (d *Decoder) avail() int { return d.wr - d.rd }

// at is the entry's byte at relative offset i.
func (d *Decoder) at(i int) byte { return d.buf[d.rd+i] }

// index is the relative offset of the first c at or after relative
// offset from, or -1.
func (d *Decoder) index(from int, c byte) int {
	i := bytes.IndexByte(d.buf[d.rd+from:d.wr], c)
	if i < 0 {
		return -1
	}
	return from + i
}

// more reads more input. It moves the entry to the front of the buffer
// when that makes room and grows the buffer when it must, so offsets
// relative to the entry stay valid. empty says whether nothing of the
// entry was read yet, which makes the end of the input io.EOF instead of
// io.ErrUnexpectedEOF.
func (d *Decoder) more(empty bool) error {
	if d.err == nil {
		if len(d.buf) > readSize && d.small >= giveBackAfter && d.avail() <= readSize/2 {
			nb := make([]byte, readSize)
			d.wr = copy(nb, d.buf[d.rd:d.wr])
			d.rd, d.buf, d.small = 0, nb, 0
		}
		if d.rd > 0 && len(d.buf)-d.wr < readSize/2 {
			copy(d.buf, d.buf[d.rd:d.wr])
			d.wr -= d.rd
			d.rd = 0
		}
		if len(d.buf)-d.wr < readSize/2 {
			nb := make([]byte, max(2*len(d.buf), d.wr+readSize))
			copy(nb, d.buf[:d.wr])
			d.buf = nb
		}
		for range 100 {
			n, err := d.r.Read(d.buf[d.wr:])
			d.wr += n
			if n > 0 {
				return nil
			}
			if err != nil {
				d.err = err
				break
			}
		}
		if d.err == nil {
			d.err = io.ErrNoProgress
		}
	}
	if errors.Is(d.err, io.EOF) {
		if empty {
			return io.EOF
		}
		return io.ErrUnexpectedEOF
	}
	return d.err
}

// remove takes the entry's bytes [from, to) out of the buffer.
func (d *Decoder) remove(from, to int) {
	copy(d.buf[d.rd+from:], d.buf[d.rd+to:d.wr])
	d.wr -= to - from
	d.dropped += to - from
}

// Next decodes the next entry. At the end of the input it returns io.EOF,
// or io.ErrUnexpectedEOF when the input ended inside an entry; it returns
// the reader's error as it is, and an error wrapping ErrMalformed for
// input that is not the export format. After an error every later call
// fails too (the input cannot be framed past it). The Entry and its
// fields are valid until the next call.
func (d *Decoder) Next() (*Entry, error) {
	if errors.Is(d.err, ErrMalformed) {
		return nil, d.err
	}
	if d.err != nil && d.avail() == 0 {
		return nil, d.more(true)
	}
	maxValue, maxEntry := d.limits()
	d.offs = d.offs[:0]
	d.ent.Truncated = false
	d.dropped = 0
	kept := 0 // bytes of names and values kept
	p := 0    // relative offset of the next line
	for {
		// A line: a field's text form, a binary field's name, or the
		// blank line that ends the entry. Look for its end within the
		// longest line kept whole.
		nl := -1
		for {
			if nl = d.index(p, '\n'); nl >= 0 || d.avail()-p > MaxName+1+maxValue {
				break
			}
			if err := d.more(d.avail() == 0 && d.dropped == 0); err != nil {
				return nil, d.fail(err)
			}
		}
		if nl == p { // the blank line: end of the entry
			p++
			break
		}
		lineEnd := nl
		if nl < 0 {
			lineEnd = d.avail()
		}
		eq := bytes.IndexByte(d.buf[d.rd+p:d.rd+min(lineEnd, p+MaxName+1)], '=')
		switch {
		case eq == 0:
			return nil, d.fail(fmt.Errorf("%w: a field without a name at byte %d of an entry", ErrMalformed, p+d.dropped))
		case eq < 0 && (nl < 0 || nl-p > MaxName):
			return nil, d.fail(fmt.Errorf("%w: a field name longer than %d bytes at byte %d of an entry", ErrMalformed, MaxName, p+d.dropped))
		case eq > 0: // NAME=VALUE\n
			o := fieldOff{name: p, nameEnd: p + eq, val: p + eq + 1, valEnd: lineEnd}
			if o.valEnd-o.val > maxValue {
				o.valEnd, o.truncated = o.val+maxValue, true
			}
			if nl < 0 || o.truncated {
				// Keep the value's first maxValue bytes and take the rest
				// of the line out, reading on to its end if need be.
				if err := d.dropLine(o.valEnd); err != nil {
					return nil, d.fail(err)
				}
			}
			p = d.keep(o, o.valEnd+1, &kept, maxEntry)
		default: // NAME\n LEN64LE VALUE \n
			o := fieldOff{name: p, nameEnd: nl, val: nl + 9, binary: true}
			for d.avail() < o.val {
				if err := d.more(false); err != nil {
					return nil, d.fail(err)
				}
			}
			n64 := binary.LittleEndian.Uint64(d.buf[d.rd+nl+1:])
			if n64 > 1<<40 {
				return nil, d.fail(fmt.Errorf("%w: a binary field of %d bytes at byte %d of an entry", ErrMalformed, n64, p+d.dropped))
			}
			n := int(n64)
			k := min(n, maxValue)
			o.valEnd, o.truncated = o.val+k, k < n
			if o.truncated {
				if err := d.dropN(o.valEnd, n-k); err != nil {
					return nil, d.fail(err)
				}
			}
			for d.avail() <= o.valEnd {
				if err := d.more(false); err != nil {
					return nil, d.fail(err)
				}
			}
			if d.at(o.valEnd) != '\n' {
				return nil, d.fail(fmt.Errorf("%w: a binary field not ended by a newline at byte %d of an entry", ErrMalformed, o.valEnd+d.dropped))
			}
			p = d.keep(o, o.valEnd+1, &kept, maxEntry)
		}
	}
	d.ent.Fields = d.ent.Fields[:0]
	for _, o := range d.offs {
		d.ent.Fields = append(d.ent.Fields, Field{Name: d.buf[d.rd+o.name : d.rd+o.nameEnd],
			Value: d.buf[d.rd+o.val : d.rd+o.valEnd], Binary: o.binary, Truncated: o.truncated})
	}
	d.ent.Size = p + d.dropped
	d.rd += p
	if p <= readSize/2 {
		d.small++
	} else {
		d.small = 0
	}
	return &d.ent, nil
}

// keep adds field o, whose bytes end before next, to the entry if it fits
// in maxEntry; one that does not is taken out of the buffer and the entry
// flagged truncated. It returns where the next field starts.
func (d *Decoder) keep(o fieldOff, next int, kept *int, maxEntry int) int {
	size := (o.nameEnd - o.name) + (o.valEnd - o.val)
	if *kept+size > maxEntry {
		d.ent.Truncated = true
		d.remove(o.name, next)
		return o.name
	}
	*kept += size
	if o.truncated {
		d.ent.Truncated = true
	}
	d.offs = append(d.offs, o)
	return next
}

// dropLine takes the bytes from relative offset at up to the end of the
// line out of the buffer, reading on as needed, so the line's newline is
// at at.
func (d *Decoder) dropLine(at int) error {
	for {
		if i := d.index(at, '\n'); i >= 0 {
			d.remove(at, i)
			return nil
		}
		d.remove(at, d.avail())
		if err := d.more(false); err != nil {
			return err
		}
	}
}

// dropN takes n bytes at relative offset at out of the buffer, reading
// them as needed.
func (d *Decoder) dropN(at, n int) error {
	for n > 0 {
		if a := d.avail() - at; a > 0 {
			k := min(a, n)
			d.remove(at, at+k)
			n -= k
			continue
		}
		if err := d.more(false); err != nil {
			return err
		}
	}
	return nil
}

// fail makes a malformed input the decoder's lasting error.
func (d *Decoder) fail(err error) error {
	if errors.Is(err, ErrMalformed) {
		d.err = err
	}
	return err
}
