package bench

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"100": 100, "1K": 1024, "4KiB": 4096, "4kib": 4096, "2KB": 2000,
		"1M": 1 << 20, "1MiB": 1 << 20, " 64 ": 64, "10b": 10, "64kb": 64000, "1.5K": 1536, "2GiB": 1 << 31} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "-1", "1.5", "12Q", "99999999G", "3GiB"} {
		if _, err := ParseSize(in); !errors.Is(err, ErrBadSize) {
			t.Errorf("ParseSize(%q): %v, want ErrBadSize", in, err)
		}
	}
	if FormatSize(4096) != "4KiB" || FormatSize(100) != "100" {
		t.Error("FormatSize")
	}
}

func TestCommonFlags(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.Register(fs, "pipe,tcp", "100")
	if !slices.Equal(c.Transports, []string{"pipe", "tcp"}) || !slices.Equal(c.Sizes, []int{100}) {
		t.Fatalf("defaults %+v", c)
	}
	if err := fs.Parse([]string{"--transport", "mq, udp", "--size", "100,1K,4KiB", "--quick", "--json", "o.json"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Transports, []string{"mq", "udp"}) || !slices.Equal(c.Sizes, []int{100, 1024, 4096}) || !c.Quick || c.JSONPath != "o.json" {
		t.Fatalf("parsed %+v", c)
	}
	fs2 := flag.NewFlagSet("x", flag.ContinueOnError)
	fs2.SetOutput(&bytes.Buffer{})
	c.Register(fs2, "pipe", "1")
	if err := fs2.Parse([]string{"--size", "lots"}); err == nil {
		t.Fatal("bad size accepted")
	}
}

func TestTableAligns(t *testing.T) {
	tb := &Table{Header: []string{"name", "median"}}
	tb.Add("pipe", FormatNs(5600))
	tb.Add("unixsock", FormatNs(11000))
	var b bytes.Buffer
	if _, err := tb.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("lines: %q", lines)
	}
	// numeric column right-aligned: every line ends at the same width
	w := len([]rune(lines[0]))
	for _, l := range lines {
		if len([]rune(l)) != w {
			t.Fatalf("ragged table:\n%s", b.String())
		}
	}
	if !strings.HasSuffix(lines[2], " 5.60µs") || !strings.HasPrefix(lines[3], "unixsock  ") {
		t.Fatalf("alignment:\n%s", b.String())
	}
}

func TestResultRoundTrip(t *testing.T) {
	type row struct {
		Mech  string  `json:"mech"`
		Stats Summary `json:"stats"`
	}
	type params struct {
		Iterations int `json:"iterations"`
	}
	res := NewResult("rtt", params{Iterations: 7})
	res.Rows = []row{{"pipe", Summarize([]float64{1, 2, 3})}}
	res.Calibration = &Calibration{GetpidNs: 150}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []row
	var p params
	got, err := ReadResult(f, &p, &rows)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != "rtt" || p.Iterations != 7 || len(rows) != 1 || rows[0].Stats.Median != 2 ||
		got.Calibration.GetpidNs != 150 || got.Host.CPUs < 1 || got.Host.Kernel == "" {
		t.Fatalf("round trip: %+v %+v %+v", got, p, rows)
	}
}
