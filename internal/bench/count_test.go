package bench

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

// Counts are decimal and unitless: 1k producers are 1000, and a byte unit
// is refused rather than read as 1024.
func TestParseCount(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "1": 1, "1000": 1000, "1k": 1000, "1K": 1000, " 20k ": 20000, "20 k": 20000,
		"1.5k": 1500, "1.1k": 1100, "1.0k": 1000, ".5k": 500, "007": 7, "1.25M": 1250000, "2M": 2000000, "2m": 2000000, "1G": 1000000000, "0.5M": 500000} {
		got, err := ParseCount(in)
		if err != nil || got != want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "-1", "+1", "1.5", "0.0001k", "1.0000000001k", "1e3", "0x10", "1KiB", "1kib", "1KB", "1kb", "4B", "1MiB",
		"1Ki", "12Q", "1,000", "99999999999G", "inf", "."} {
		if v, err := ParseCount(in); !errors.Is(err, ErrBadCount) {
			t.Errorf("ParseCount(%q) = %d, %v; want ErrBadCount", in, v, err)
		}
	}
	if _, err := ParseCount("1KiB"); err == nil || !strings.Contains(err.Error(), "size, not a count") {
		t.Errorf("ParseCount(1KiB): %v, want it to say a size is not a count", err)
	}
}

func TestParseCounts(t *testing.T) {
	got, err := ParseCounts("1, 4,1k")
	if err != nil || !slices.Equal(got, []int{1, 4, 1000}) {
		t.Fatalf("ParseCounts = %v, %v", got, err)
	}
	for _, in := range []string{"", " , ", "1,4KiB"} {
		if _, err := ParseCounts(in); !errors.Is(err, ErrBadCount) {
			t.Errorf("ParseCounts(%q): %v, want ErrBadCount", in, err)
		}
	}
}

func TestCountFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	var rate int
	var producers []int
	CountVar(fs, &rate, "rate", 5, "`N` records/s")
	CountsVar(fs, &producers, "producers", []int{1, 4}, "producer `counts`")
	if rate != 5 || !slices.Equal(producers, []int{1, 4}) {
		t.Fatalf("defaults: rate %d producers %v", rate, producers)
	}
	if err := fs.Parse([]string{"--rate", "20k", "--producers", "1k,2"}); err != nil {
		t.Fatal(err)
	}
	if rate != 20000 || !slices.Equal(producers, []int{1000, 2}) {
		t.Fatalf("parsed: rate %d producers %v", rate, producers)
	}
	for _, args := range [][]string{{"--producers", "1KiB"}, {"--rate", "4KB"}} {
		if err := fs.Parse(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, want := range []string{"-rate N", "(default 5)", "-producers counts", "(default 1,4)"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
}
