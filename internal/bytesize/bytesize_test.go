package bytesize

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"512", 512},
		{" 64 ", 64},
		{"10b", 10},
		{"64k", 64 << 10},
		{"64K", 64 << 10},
		{"64KiB", 64 << 10},
		{"64kib", 64 << 10},
		{"64KB", 64000},
		{"64kb", 64000}, // the case three parsers disagreed on
		{"64 kB", 64000},
		{"4MiB", 4 << 20},
		{"4m", 4 << 20},
		{"10 MB", 10e6},
		{"1g", 1 << 30},
		{"1GiB", 1 << 30},
		{"1GB", 1e9},
		{"1.5M", 3 << 19},
		{"1.5K", 1536},
		{"0.5KB", 500},
		{"8589934591G", 8589934591 << 30},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"", "K", "lots", "-1", "-1K", "+1", "1.5", "1.2345K", "1..5K", ".", "1e3", "inf", "NaN", "0x10",
		"12Q", "5XB", "1KK",
		"9223372036854775808",  // one past MaxInt64
		"8589934592G",          // 2^63 bytes
		"99999999999999999999", // beyond int64 before the unit
		"9999999999999999999.5G",
	} {
		if got, err := Parse(bad); !errors.Is(err, ErrBadSize) {
			t.Errorf("Parse(%q) = %d, %v; want ErrBadSize", bad, got, err)
		}
	}
}
