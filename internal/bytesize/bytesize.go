// Package bytesize is the one parser of byte sizes in the repository: the
// aggregator's configuration and flags, the shm ring's options and every
// ipcbench size flag read sizes through Parse, so "64kb" means the same
// everywhere (ADR 0037 item 5, ADR 0043).
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrBadSize is returned (wrapped) for a string that is not a size.
var ErrBadSize = errors.New("bad size")

// units are matched longest first, in any case. K, M and G are binary,
// as buffer sizes are powers of two in practice; KB, MB and GB are
// decimal, as in systemd and the configuration file.
var units = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
}

// Parse reads a size: a non-negative number with an optional unit (B, K,
// KiB, KB, M, MiB, MB, G, GiB, GB, in any case, spaces allowed between).
// K/KiB, M/MiB and G/GiB are powers of 1024; KB, MB and GB powers of
// 1000. A decimal fraction is allowed where the result is a whole number
// of bytes ("1.5K" is 1536, "1.5" is an error).
func Parse(s string) (int64, error) {
	num := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	// Only digits and one point: ParseFloat alone would take "1e3",
	// "inf", "0x10" and a sign.
	if num == "" || strings.Trim(num, "0123456789.") != "" || strings.Count(num, ".") > 1 || num == "." {
		return 0, fmt.Errorf("%w: %q is not a size like 512, 64KiB, 64KB or 1.5M", ErrBadSize, s)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return 0, fmt.Errorf("%w: %q is too large", ErrBadSize, s)
		}
		return n * mult, nil
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %w", ErrBadSize, s, err)
	}
	bytes := v * float64(mult)
	if bytes >= math.MaxInt64 {
		return 0, fmt.Errorf("%w: %q is too large", ErrBadSize, s)
	}
	if bytes != math.Trunc(bytes) {
		return 0, fmt.Errorf("%w: %q is not a whole number of bytes", ErrBadSize, s)
	}
	return int64(bytes), nil
}
