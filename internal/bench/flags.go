package bench

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ipclab/logagg/internal/bytesize"
)

// ErrBadSize is returned (wrapped) by ParseSize and ParseSizes for an
// unparsable or too large size.
var ErrBadSize = bytesize.ErrBadSize

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

// ParseSize parses a payload or buffer size (bytesize.Parse: K and KiB
// are 1024, KB is 1000, in any case) of at most 2 GiB, the most one
// write or message in the lab moves.
func ParseSize(s string) (int, error) {
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, err
	}
	if n > 1<<31 {
		return 0, fmt.Errorf("%w: %q is above 2GiB", ErrBadSize, s)
	}
	return int(n), nil
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
