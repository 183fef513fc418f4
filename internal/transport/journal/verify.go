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
// read again by cursor with a journalctl of its own; one read again
// whole is written so and counted (KindTorn). One that reads the same
// again is what the journal holds: the writer hashes a field given twice
// with the same value twice (the two cancel) and keeps it once, so such
// an entry never adds up. It is written as journalctl gave it and
// counted (KindUnverified). ADR 0066.

// Decode error kinds of entries that do not add up to their cursor.
const (
	// KindTorn counts entries journalctl gave without all their fields
	// (their cursor's hash says so) and that were read again whole.
	KindTorn = "journal_torn"
	// KindUnverified counts entries whose fields do not add up to their
	// cursor's hash even when read again (or that were not read again:
	// see rereadBurst). They are written with the fields journalctl gave.
	KindUnverified = "journal_unverified"
)

// rereadPauses are the waits before each reading again of an entry that
// does not add up: the writer finishes linking an entry in microseconds,
// so the first usually finds it whole; the next ones only if the entry
// read differently the time before.
var rereadPauses = []time.Duration{time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond}

// The budget of entries read again: rereadBurst at once, one more each
// rereadEvery. A torn read is rare (one in about a million entries
// here); a journal whose entries repeat a field with the same value must
// not cost a journalctl run per entry.
const (
	rereadBurst = 10
	rereadEvery = time.Second
)

// check hashes ent's fields (sum, to compare two reads of one entry) and
// reports whether they add up to the hash in its cursor; ok too when that
// cannot be told (no cursor with x=, or a value cut by the decoder's
// limits).
func check(ent *Entry) (sum uint64, ok bool) {
	want, hashed := cursorHash(fieldValue(ent, "__CURSOR"))
	if !hashed || ent.Truncated {
		return 0, true
	}
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
		sum ^= fieldHash(f.Name, f.Value)
	}
	return sum, sum == want || (boot != nil && sum^fieldHash([]byte("_BOOT_ID"), boot) == want)
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
	sum, ok := check(ent)
	if ok {
		return ent
	}
	cursor := fieldValue(ent, "__CURSOR")
	if r.takeReread() {
		why := "read again, it is the same"
		for _, pause := range rereadPauses {
			if sleep(ctx, pause) != nil {
				return nil
			}
			again, err := r.reread(ctx, cursor)
			if ctx.Err() != nil {
				return nil // its journalctl was killed with it
			}
			if err != nil {
				why = "reading it again: " + err.Error()
				break
			}
			againSum, ok := check(again)
			if ok {
				r.count(KindTorn)
				r.l.log.Info("journal: an entry read while it was being written lacked fields; read again whole",
					"cursor", string(cursor))
				return again
			}
			if againSum == sum {
				break // what the journal holds, not a read in progress
			}
			sum, why = againSum, "read again, it still does not add up"
		}
		// Logged only within the budget: a journal of such entries
		// is counted, not logged entry by entry.
		r.l.log.Warn("journal: an entry's fields do not add up to the hash in its cursor; written as journalctl gave it "+
			"(a field given twice with the same value does this)", "cursor", string(cursor), "why", why)
	}
	r.count(KindUnverified)
	return ent
}

func (r *reader) count(kind string) {
	if r.l.m != nil {
		r.l.m.DecodeError(kind, 1)
	}
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
	ent, err := r.l.decoder(&out).Next()
	if err != nil {
		return nil, err
	}
	if got := fieldValue(ent, "__CURSOR"); !bytes.Equal(got, cursor) {
		return nil, errors.New("journalctl gave another entry: " + string(got))
	}
	return ent, nil
}
