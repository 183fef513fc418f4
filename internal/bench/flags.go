package bench

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrBadSize is returned (wrapped) by ParseSize for an unparsable size.
var ErrBadSize = errors.New("bad size")

// Common holds the flags every ipcbench subcommand accepts. Register it on
// the subcommand's FlagSet, parse, then read the fields.
type Common struct {
	// Transports is --transport, split on commas. Empty means the
	// subcommand's default set.
	Transports []string
	// Sizes is --size in payload bytes.
	Sizes []int
	// JSONPath is --json: where to write the Result ("-" for stdout).
	JSONPath string
	// Quick is --quick: short runs for tests and CI.
	Quick bool
	// NoProgress is --no-progress; the bar is also off when stderr is not
	// a terminal.
	NoProgress bool
}

// Register adds the common flags to fs with the given defaults (a
// comma-separated transport list and size list).
func (c *Common) Register(fs *flag.FlagSet, defTransports, defSizes string) {
	c.Transports = splitList(defTransports)
	sizes, err := ParseSizes(defSizes)
	if err != nil {
		// Defaults are written by programmers; a bad one is a bug the first
		// test run shows, so fail loudly rather than silently use nothing.
		panic(fmt.Sprintf("bench: bad default sizes %q: %v", defSizes, err))
	}
	c.Sizes = sizes
	fs.Func("transport", "comma-separated list of mechanisms (default "+defTransports+")", func(s string) error {
		c.Transports = splitList(s)
		if len(c.Transports) == 0 {
			return errors.New("empty transport list")
		}
		return nil
	})
	fs.Func("size", "comma-separated payload sizes in bytes, e.g. 100,1K,4KiB (default "+defSizes+")", func(s string) error {
		v, err := ParseSizes(s)
		if err != nil {
			return err
		}
		c.Sizes = v
		return nil
	})
	fs.StringVar(&c.JSONPath, "json", "", "write the result as JSON to `FILE` (- for stdout)")
	fs.BoolVar(&c.Quick, "quick", false, "short runs (tests, CI)")
	fs.BoolVar(&c.NoProgress, "no-progress", false, "never draw the progress bar")
}

// ProgressEnabled reports whether a progress bar should be drawn on stderr.
func (c *Common) ProgressEnabled() bool {
	return !c.NoProgress && IsTerminal(os.Stderr)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ParseSizes parses a comma-separated list of sizes (see ParseSize).
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := ParseSize(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty list", ErrBadSize)
	}
	return out, nil
}

// ParseSize parses a byte count: a plain integer, or one followed by K, KB,
// KiB, M, MB, MiB (case-insensitive). K and KiB both mean 1024 because
// buffer sizes are powers of two in practice; KB means 1000.
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	low := strings.ToLower(t)
	mult := 1
	for _, u := range []struct {
		suf string
		m   int
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"kb", 1000}, {"mb", 1000_000}, {"k", 1 << 10}, {"m", 1 << 20}, {"b", 1}} {
		if strings.HasSuffix(low, u.suf) {
			mult = u.m
			low = strings.TrimSpace(strings.TrimSuffix(low, u.suf))
			break
		}
	}
	n, err := strconv.Atoi(low)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %q", ErrBadSize, s)
	}
	if n > (1<<31)/mult {
		return 0, fmt.Errorf("%w: %q too large", ErrBadSize, s)
	}
	return n * mult, nil
}

// FormatSize renders n bytes compactly (4096 -> "4KiB", 100 -> "100").
func FormatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n)
}
