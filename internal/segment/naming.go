// Package segment is the aggregator's output: a JSON-lines file that is
// rotated by size into numbered segments, fsynced by policy, and read back by
// forwarders with durable checkpoints.
//
// # Naming
//
// The active segment is the --output path itself (aggregated_logs.jsonl, as
// in the seed). When it is rotated it is renamed to "<output>.<seq>", seq
// being a zero-padded decimal that only grows (aggregated_logs.jsonl.00000001,
// …). The active segment's own sequence number is one more than the highest
// rotated one, so a segment keeps its number for life: a reader that opened
// the active file as segment S finds the same inode at "<output>.<S>" after
// rotation. Checkpoints are (seq, byte offset).
//
// # Retention
//
// Rotation keeps at most MaxFiles rotated segments, deleting the oldest, but
// never one that a registered Retainer (a forwarder) still needs.
package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const seqDigits = 8

// RotatedName is the path of rotated segment seq of output.
func RotatedName(output string, seq uint64) string {
	return fmt.Sprintf("%s.%0*d", output, seqDigits, seq)
}

// ListRotated returns the sequence numbers of the rotated segments of output
// that exist, ascending.
func ListRotated(output string) ([]uint64, error) {
	dir, base := filepath.Split(output)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments in %s: %w", dir, err)
	}
	var seqs []uint64
	prefix := base + "."
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !e.Type().IsRegular() {
			continue
		}
		s := name[len(prefix):]
		if len(s) < seqDigits {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			continue
		}
		seqs = append(seqs, n)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs, nil
}

// ActiveSeq is the sequence number of the active segment: one more than the
// highest rotated segment (1 when none exists).
func ActiveSeq(output string) (uint64, error) {
	seqs, err := ListRotated(output)
	if err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 1, nil
	}
	return seqs[len(seqs)-1] + 1, nil
}

// Retainer is asked before a rotated segment is deleted. A Kafka forwarder
// implements it so that retention never deletes data it has not shipped.
type Retainer interface {
	// MayDelete reports whether segment seq has been fully checkpointed.
	MayDelete(seq uint64) bool
}
