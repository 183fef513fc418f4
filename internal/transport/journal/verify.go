package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/bits"
	"strconv"
	"time"
)

// A reader of a journal file that is being written can see an entry
// before the writer has finished linking it: sd-journal then skips the
// field whose data object does not yet look valid ("data object is bad,
// skipping over it", systemd 250 on) and journalctl exports the entry
// without it. systemd/systemd#40263 is the same seen from another
// reader; our TestJournalKilled caught it once in 100,000 entries as an
// entry without its MESSAGE.
//
// The entry's cursor tells: its x= part is the XOR of the Jenkins hash
// (lookup3's hashlittle2, both halves) of every field as "NAME=value",
// computed by the writer (journal_file_append_entry: xor_hash, the same
// for keyed-hash files). An entry whose fields do not add up to it is
// read again by cursor with a journalctl of its own, a few times over a
// fraction of a second; what still does not add up is written as
// journalctl gave it and counted (KindIncomplete), as is every torn read
// (KindTorn). ADR 0066.

// Decode error kinds of torn reads.
const (
	// KindTorn counts entries journalctl gave without all their fields
	// (their cursor's hash says so): each is read again by cursor.
	KindTorn = "journal_torn"
	// KindIncomplete counts the torn entries that reading again did not
	// mend (or that were not read again: see rereadBudget). They are
	// written with the fields journalctl gave.
	KindIncomplete = "journal_incomplete"
)

// rereadPauses are the waits before each reading again of a torn entry:
// the writer finishes linking an entry in microseconds, so the first
// usually finds it whole.
var rereadPauses = []time.Duration{time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond}

// rereadBudget bounds the journalctl runs spent reading torn entries
// again: rereadBurst at once, one more each rereadEvery. An entry that
// never adds up (a journal written by something that hashed otherwise)
// must not cost a process per entry.
const (
	rereadBurst = 10
	rereadEvery = 100 * time.Millisecond
)

// whole reports whether ent's fields add up to the hash in its cursor;
// true too when that cannot be told (no cursor with x=, or a value cut
// by the decoder's limits).
func whole(ent *Entry) bool {
	want, ok := cursorHash(fieldValue(ent, "__CURSOR"))
	if !ok || ent.Truncated {
		return true
	}
	var x uint64
	var boot []byte
	for i := range ent.Fields {
		f := &ent.Fields[i]
		switch {
		case bytes.HasPrefix(f.Name, []byte("__")): // the cursor, timestamps, __SEQNUM…: not data
			continue
		case string(f.Name) == "_BOOT_ID":
			// journalctl writes the entry header's boot id and leaves
			// out a _BOOT_ID data field, if the entry has one: try both.
			boot = f.Value
			continue
		}
		x ^= fieldHash(f.Name, f.Value)
	}
	return x == want || (boot != nil && x^fieldHash([]byte("_BOOT_ID"), boot) == want)
}

// cursorHash is the x= part of a cursor (hexadecimal).
func cursorHash(c []byte) (uint64, bool) {
	for len(c) > 0 {
		var part []byte
		part, c, _ = bytes.Cut(c, []byte(";"))
		if bytes.HasPrefix(part, []byte("x=")) {
			v, err := strconv.ParseUint(string(part[2:]), 16, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// fieldHash is systemd's jenkins_hash64 of name "=" value.
func fieldHash(name, value []byte) uint64 {
	// A text field is NAME=value in the decoder's buffer already: hash it
	// in place, in one piece.
	if n := len(name) + 1 + len(value); len(name) > 0 && len(value) > 0 && cap(name) >= n {
		if joined := name[:n]; joined[len(name)] == '=' && &joined[len(name)+1] == &value[0] {
			return jenkinsOne(joined)
		}
	}
	return jenkins64(name, []byte{'='}, value)
}

// jenkins64 is systemd's jenkins_hash64 of the three parts one after the
// other, without joining them: lookup3's hashlittle2 with both seeds 0,
// c in the high half and b in the low.
func jenkins64(p0, p1, p2 []byte) uint64 {
	n := len(p0) + len(p1) + len(p2)
	a := 0xdeadbeef + uint32(n)
	b, c := a, a
	if n == 0 {
		return uint64(c)<<32 | uint64(b)
	}
	var blk [12]byte
	fill, left := 0, n
	for _, part := range [3][]byte{p0, p1, p2} {
		for len(part) > 0 {
			if fill == 0 && len(part) > 12 && left > 12 { // a whole block in place
				a += binary.LittleEndian.Uint32(part)
				b += binary.LittleEndian.Uint32(part[4:])
				c += binary.LittleEndian.Uint32(part[8:])
				a, b, c = mix(a, b, c)
				part, left = part[12:], left-12
				continue
			}
			k := copy(blk[fill:], part)
			part, fill = part[k:], fill+k
			if fill == 12 && left > 12 { // a block, and more after it
				a += binary.LittleEndian.Uint32(blk[:])
				b += binary.LittleEndian.Uint32(blk[4:])
				c += binary.LittleEndian.Uint32(blk[8:])
				a, b, c = mix(a, b, c)
				fill, left = 0, left-12
			}
		}
	}
	// The last 1 to 12 bytes, zero padded.
	clear(blk[fill:])
	a += binary.LittleEndian.Uint32(blk[:])
	b += binary.LittleEndian.Uint32(blk[4:])
	c += binary.LittleEndian.Uint32(blk[8:])
	_, b, c = final(a, b, c)
	return uint64(c)<<32 | uint64(b)
}

// jenkinsOne is jenkins64 of one piece, for speed: whole blocks read in
// place, and the last bytes without a copy.
func jenkinsOne(k []byte) uint64 {
	a := 0xdeadbeef + uint32(len(k))
	b, c := a, a
	for len(k) > 12 {
		a += binary.LittleEndian.Uint32(k)
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	switch {
	case len(k) == 0:
		return uint64(c)<<32 | uint64(b)
	case len(k) > 8:
		a += binary.LittleEndian.Uint32(k)
		b += binary.LittleEndian.Uint32(k[4:])
		c += partial32(k[8:])
	case len(k) > 4:
		a += binary.LittleEndian.Uint32(k)
		b += partial32(k[4:])
	default:
		a += partial32(k)
	}
	_, b, c = final(a, b, c)
	return uint64(c)<<32 | uint64(b)
}

// partial32 is 1 to 4 bytes as a little-endian number, zero padded.
func partial32(k []byte) uint32 {
	switch len(k) {
	case 1:
		return uint32(k[0])
	case 2:
		return uint32(k[0]) | uint32(k[1])<<8
	case 3:
		return uint32(k[0]) | uint32(k[1])<<8 | uint32(k[2])<<16
	}
	return binary.LittleEndian.Uint32(k)
}

func final(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

// mend returns ent if it is whole, or else the same entry read again
// whole; failing that ent itself, counted. It returns nil if ctx ends
// first: the entry is not emitted, and the next run reads it again after
// the checkpoint. It runs on the reader's goroutine: journalctl waits on
// its pipe meanwhile.
func (r *reader) mend(ctx context.Context, ent *Entry) *Entry {
	if whole(ent) {
		return ent
	}
	cursor := fieldValue(ent, "__CURSOR")
	if r.l.m != nil {
		r.l.m.DecodeError(KindTorn, 1)
	}
	err := errors.New("too many torn entries to read each again")
	if r.takeReread() {
		for _, pause := range rereadPauses {
			if sleep(ctx, pause) != nil {
				return nil
			}
			var again *Entry
			if again, err = r.reread(ctx, cursor); err == nil {
				if whole(again) {
					r.l.log.Info("journal: an entry read while it was being written lacked fields; read again whole",
						"cursor", string(cursor))
					return again
				}
				err = errors.New("still without all its fields")
			}
		}
	}
	if r.l.m != nil {
		r.l.m.DecodeError(KindIncomplete, 1)
	}
	r.l.log.Warn("journal: an entry's fields do not add up to the hash in its cursor; written as journalctl gave it",
		"cursor", string(cursor), "err", err)
	return ent
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// takeReread takes one reading again from the budget, if there is one.
func (r *reader) takeReread() bool {
	now := time.Now()
	if r.rereads.at.IsZero() {
		r.rereads.tokens, r.rereads.at = rereadBurst, now
	}
	if gained := int(now.Sub(r.rereads.at) / rereadEvery); gained > 0 {
		r.rereads.tokens = min(rereadBurst, r.rereads.tokens+gained)
		r.rereads.at = r.rereads.at.Add(time.Duration(gained) * rereadEvery)
	}
	if r.rereads.tokens == 0 {
		return false
	}
	r.rereads.tokens--
	return true
}

// reread reads the entry at cursor with a journalctl of its own.
func (r *reader) reread(ctx context.Context, cursor []byte) (*Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := r.l.command(ctx, r.l.args("--cursor="+string(cursor), "--lines=1"))
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	d := NewDecoder(&out)
	d.MaxValue = r.l.d.Opts.MaxRecord
	d.MaxEntry = max(4*r.l.d.Opts.MaxRecord, DefaultMaxEntry)
	ent, err := d.Next()
	if err != nil {
		return nil, err
	}
	if got := fieldValue(ent, "__CURSOR"); !bytes.Equal(got, cursor) {
		return nil, errors.New("journalctl gave another entry: " + string(got))
	}
	return ent, nil
}
