package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
)

// ErrBadInput is returned (wrapped) for a result or samples file that
// cannot be decoded.
var ErrBadInput = errors.New("bad report input")

// Input is one results file: the envelope, with Params and Rows kept raw
// until the renderer decodes them by Kind.
type Input struct {
	// Name is how the report refers to the file (its path as given).
	Name   string
	Result *bench.Result
	Params json.RawMessage
	Rows   json.RawMessage
}

// Load reads one bench.Result JSON file.
func Load(path string) (*Input, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	return Decode(path, f)
}

// Decode reads one bench.Result from r; name is how the report refers to it.
func Decode(name string, r io.Reader) (*Input, error) {
	in := &Input{Name: name}
	res, err := bench.ReadResult(r, &in.Params, &in.Rows)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadInput, name, err)
	}
	if res.Kind == "" {
		return nil, fmt.Errorf("%w: %s: no \"kind\" field (not an ipcbench result?)", ErrBadInput, name)
	}
	// The renderer looks at the raw copies; drop the pointers so nobody
	// mistakes them for decoded values.
	res.Params, res.Rows = nil, nil
	in.Result = res
	return in, nil
}

// SamplesHeader is the header line of `ipcbench rtt --samples` files.
const SamplesHeader = "mechanism,size,iteration,ns"

// Samples is one rtt samples CSV, grouped into series.
type Samples struct {
	Name   string
	Series []*Series // in order of first appearance in the file
}

// Series is every sample of one mechanism at one size, in iteration order.
type Series struct {
	Mechanism string
	Size      int
	Ns        []float64
}

// LoadSamples reads an `ipcbench rtt --samples` CSV.
func LoadSamples(path string) (*Samples, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	return ReadSamples(path, f)
}

// ReadSamples parses a samples CSV from r. The format is fixed and all
// numeric, so it is split by hand: encoding/csv would allocate a record per
// line, and seed 004's runs have a million lines per mechanism.
func ReadSamples(name string, r io.Reader) (*Samples, error) {
	s := &Samples{Name: name}
	idx := map[string]*Series{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if n == 1 {
			if line != SamplesHeader {
				return nil, fmt.Errorf("%w: %s: header %q, want %q", ErrBadInput, name, line, SamplesHeader)
			}
			continue
		}
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("%w: %s line %d: %d fields, want 4", ErrBadInput, name, n, len(f))
		}
		size, err1 := strconv.Atoi(f[1])
		ns, err2 := strconv.ParseFloat(f[3], 64)
		if err1 != nil || err2 != nil || f[0] == "" {
			return nil, fmt.Errorf("%w: %s line %d: %q", ErrBadInput, name, n, line)
		}
		key := f[0] + "\x00" + f[1]
		ser := idx[key]
		if ser == nil {
			ser = &Series{Mechanism: f[0], Size: size}
			idx[key] = ser
			s.Series = append(s.Series, ser)
		}
		ser.Ns = append(ser.Ns, ns)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadInput, name, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %s: empty file", ErrBadInput, name)
	}
	return s, nil
}
