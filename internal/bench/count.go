package bench

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadCount is returned (wrapped) by ParseCount and ParseCounts for a
// string that is not a count.
var ErrBadCount = errors.New("bad count")

// countUnits are decimal, as counts of things are: 1k producers are a
// thousand, not 1024. exp is the power of ten.
var countUnits = []struct {
	suffix string
	exp    int
}{{"k", 3}, {"m", 6}, {"g", 9}}

// ParseCount reads a count of things (producers, records, records/s,
// round trips, connections): a non-negative number with an optional
// decimal multiplier k (1000), M (10^6) or G (10^9), in any case. A
// decimal fraction is allowed where the result is whole ("1.5k" is 1500,
// "1.5" is an error). A byte unit ("1KiB", "1KB", "1B") is refused: a
// count is not a size, and the size parser's K is 1024 (ParseSize).
func ParseCount(s string) (int, error) {
	num := strings.ToLower(strings.TrimSpace(s))
	if strings.HasSuffix(num, "b") {
		return 0, fmt.Errorf("%w: %q is a size, not a count (write 1k for 1000)", ErrBadCount, s)
	}
	exp := 0
	for _, u := range countUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, exp = strings.TrimSpace(rest), u.exp
			break
		}
	}
	// Only digits and one point: ParseFloat would take "1e3", "inf",
	// "0x10" and a sign. The arithmetic is on the digits, exact: "1.1k"
	// is 1100 where a float64 makes it 1100.0000000000002.
	whole, frac, _ := strings.Cut(num, ".")
	if whole+frac == "" || strings.Trim(whole+frac, "0123456789") != "" {
		return 0, fmt.Errorf("%w: %q is not a count like 4, 1000, 20k or 1.5M", ErrBadCount, s)
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > exp {
		return 0, fmt.Errorf("%w: %q is not a whole number", ErrBadCount, s)
	}
	digits := strings.TrimLeft(whole+frac+strings.Repeat("0", exp-len(frac)), "0")
	if digits == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(digits, 10, strconv.IntSize)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is too large", ErrBadCount, s)
	}
	return int(n), nil
}

// ParseCounts parses a comma-separated list of counts (ParseCount).
func ParseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := ParseCount(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty list", ErrBadCount)
	}
	return out, nil
}

// countValue is a flag.Value read by ParseCount.
type countValue int

func (c *countValue) Set(s string) error {
	v, err := ParseCount(s)
	if err != nil {
		return err
	}
	*c = countValue(v)
	return nil
}

func (c *countValue) String() string { return strconv.Itoa(int(*c)) }

// CountVar defines a flag that holds a count (ParseCount), as flag.IntVar
// defines an int. Every flag of the lab that counts something is one, so
// that --producers 1k means 1000 and --producers 1KiB is an error.
func CountVar(fs *flag.FlagSet, p *int, name string, value int, usage string) {
	*p = value
	fs.Var((*countValue)(p), name, usage)
}

// countsValue is a flag.Value read by ParseCounts.
type countsValue []int

func (c *countsValue) Set(s string) error {
	v, err := ParseCounts(s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

func (c *countsValue) String() string {
	if c == nil {
		return ""
	}
	f := make([]string, len(*c))
	for i, v := range *c {
		f[i] = strconv.Itoa(v)
	}
	return strings.Join(f, ",")
}

// CountsVar defines a flag that holds a comma-separated list of counts
// (ParseCounts).
func CountsVar(fs *flag.FlagSet, p *[]int, name string, value []int, usage string) {
	*p = value
	fs.Var((*countsValue)(p), name, usage)
}
