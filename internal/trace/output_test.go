package trace

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// The fixtures were captured with `bpftrace -f json` on Linux 6.18 / bpftrace
// 0.17 while a Go producer wrote 5000 records of 100 B to a unix socket.
func parseFixture(t *testing.T, name string) *Output {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestParseProducerSyscalls(t *testing.T) {
	o := parseFixture(t, "producer_syscalls.json")
	if o.AttachedProbes != 1 {
		t.Errorf("attached probes %d, want 1", o.AttachedProbes)
	}
	c := o.SyscallCounts()
	if c["write"] < 5000 {
		t.Errorf("write count %d, want >= 5000 (one per record)", c["write"])
	}
	if tot, _ := o.Count("@total", ""); tot != o.Total("@syscalls") {
		t.Errorf("@total %d != sum of @syscalls %d", tot, o.Total("@syscalls"))
	}
}

func TestParseSyscallLatency(t *testing.T) {
	o := parseFixture(t, "syscall_latency.json")
	w := o.Hists["@lat_ns"]["write"]
	if got, calls := HistCount(w), o.Maps["@calls"]["write"]; int64(got) != calls || calls < 5000 {
		t.Errorf("write hist holds %d, @calls says %d, want equal and >= 5000", got, calls)
	}
	for _, b := range w {
		if b.Min > b.Max {
			t.Errorf("bucket %+v inverted", b)
		}
	}
	// The fixture's futex histogram ends with bpftrace 0.17's wrapped top
	// bucket, {"min": -2147483648, "max": 0}: one wait of 2 s or more.
	futex := o.Hists["@lat_ns"]["futex"]
	top := futex[len(futex)-1]
	if top.Min != TopBucketMin || top.Max != math.MaxInt64 || top.Count != 1 {
		t.Errorf("futex top bucket %+v, want [2^31, open) with 1 sample", top)
	}
	for _, b := range futex {
		if b.Min < 0 {
			t.Errorf("futex bucket %+v: a negative duration", b)
		}
	}
}

func TestParseShapes(t *testing.T) {
	in := strings.Join([]string{
		`{"type": "attached_probes", "data": {"probes": 3}}`,
		``,
		`{"type": "printf", "data": "sec=1 bytes=10\n"}`,
		`{"type": "map", "data": {"@n": 5}}`,
		`{"type": "map", "data": {"@c": {"a,1": 2, "b,2": 3}}}`,
		`{"type": "hist", "data": {"@lh": [{"max": -1, "count": 4}, {"min": 0, "max": 19, "count": 1}, {"min": 100, "count": 7}]}}`,
		`{"type": "stats", "data": {"@s": {"count": 2, "average": 3, "total": 6}}}`,
		`{"type": "stats", "data": {"@k": {"0": {"count": 1, "average": 1, "total": 1}}}}`,
		`{"type": "time", "data": "12:00:00\n"}`,
	}, "\n")
	o, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if o.AttachedProbes != 3 || len(o.Printf) != 1 || o.Maps["@n"][""] != 5 || o.Maps["@c"]["b,2"] != 3 {
		t.Errorf("maps/printf wrong: %+v", o)
	}
	lh := o.Hists["@lh"][""]
	if len(lh) != 3 || lh[0].Min != math.MinInt64 || lh[0].Max != -1 || lh[2].Max != math.MaxInt64 || lh[2].Count != 7 {
		t.Errorf("lhist buckets wrong: %+v", lh)
	}
	if o.Stats["@s"][""].Total != 6 || o.Stats["@k"]["0"].Count != 1 {
		t.Errorf("stats wrong: %+v", o.Stats)
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, in := range []string{"not json", `{"type": "map", "data": {"@m": {"k": "x"}}}`} {
		if _, err := Parse(strings.NewReader(in)); !errors.Is(err, ErrBadOutput) {
			t.Errorf("Parse(%q) = %v, want ErrBadOutput", in, err)
		}
	}
}

func TestProbesOf(t *testing.T) {
	src := []byte(`// kprobe:in_comment
tracepoint:a:b,
t:c:d/pid == $1/ { printf("{ kprobe:in_string }"); }
uprobe:/bin/bash:readline /pid/ { @x = 1; }
END { clear(@x); }`)
	got := strings.Join(ProbesOf(src), " ")
	if want := "tracepoint:a:b t:c:d uprobe:/bin/bash:readline END"; got != want {
		t.Errorf("ProbesOf = %q, want %q", got, want)
	}
}

func TestCategoryAndNames(t *testing.T) {
	for name, want := range map[string]Category{
		"futex": Runtime, "epoll_pwait": Runtime, "tracepoint:syscalls:sys_enter_nanosleep": Runtime,
		"write": Transport, "sys_enter_recvmmsg": Transport, "openat": Transport, "uname": Runtime, "statx": Other,
	} {
		if got := CategoryOf(name); got != want {
			t.Errorf("CategoryOf(%q) = %q, want %q", name, got, want)
		}
	}
	if SyscallName(1) != "write" || SyscallName(202) != "futex" || SyscallName(99999) != "syscall_99999" {
		t.Errorf("SyscallName wrong: %s %s %s", SyscallName(1), SyscallName(202), SyscallName(99999))
	}
	r := parseDropReasons([]byte(`__print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, { 6, "SOCKET_RCVBUFF" })`))
	if r[6] != "SOCKET_RCVBUFF" || len(r) != 2 {
		t.Errorf("drop reasons %v", r)
	}
}
