package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Result is the envelope every subcommand writes with --json. `ipcbench
// report` re-renders it later without measuring. Kind names the subcommand
// ("rtt", "calibrate", ...) and so the shape of Params and Rows.
type Result struct {
	Kind        string       `json:"kind"`
	Started     time.Time    `json:"started"`
	Finished    time.Time    `json:"finished"`
	Command     []string     `json:"command,omitempty"`
	Host        Host         `json:"host"`
	Params      any          `json:"params"`
	Calibration *Calibration `json:"calibration,omitempty"`
	// Notes are things the reader must know to trust the rows: refused
	// SCHED_FIFO, skipped combinations, limits that shaped the run.
	Notes []string `json:"notes,omitempty"`
	Rows  any      `json:"rows"`
}

// Host describes the machine a Result was measured on.
type Host struct {
	Hostname     string `json:"hostname"`
	CPUs         int    `json:"cpus"`
	ModelName    string `json:"model_name"`
	Kernel       string `json:"kernel"`
	GoVersion    string `json:"go_version"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	MaxDgramQlen int    `json:"max_dgram_qlen"`
	RmemMax      int    `json:"rmem_max"`
	RmemDefault  int    `json:"rmem_default"`
	MqMsgMax     int    `json:"mq_msg_max"`
	MqMsgsizeMax int    `json:"mq_msgsize_max"`
	MqQueuesMax  int    `json:"mq_queues_max"`
}

// Calibration is the machine calibration block (see package calibrate).
// Figures are medians over batches, in nanoseconds unless named otherwise;
// a zero value means "not measured" and Notes says why.
type Calibration struct {
	TimeNowNs       float64 `json:"time_now_ns"`
	MonoNs          float64 `json:"mono_ns"`
	ClockGettimeCNs float64 `json:"clock_gettime_c_ns,omitempty"`
	GetpidNs        float64 `json:"getpid_ns"`
	SchedYieldNs    float64 `json:"sched_yield_ns"`
	TSCPerNs        float64 `json:"tsc_per_ns,omitempty"`
	RdtscpNs        float64 `json:"rdtscp_ns,omitempty"`
	CacheLineRTTNs  float64 `json:"cacheline_rtt_ns,omitempty"`
	CacheLineCPUs   []int   `json:"cacheline_cpus,omitempty"`
	// Checks are the machine properties the figures rest on (TSC flags,
	// frequency governor, SMT siblings, clocksource), each with a verdict.
	Checks []MachineCheck `json:"checks,omitempty"`
	Notes  []string       `json:"notes,omitempty"`
}

// MachineCheck is one property of the host that decides whether its
// figures can be trusted or compared, read from /proc or /sys.
type MachineCheck struct {
	Name    string `json:"name"`
	Value   string `json:"value"`   // what the host shows, or "not exposed"
	Verdict string `json:"verdict"` // VerdictOK or VerdictWarn
	Why     string `json:"why"`     // what it means for the figures
}

// Verdicts of a MachineCheck.
const (
	VerdictOK   = "ok"
	VerdictWarn = "warn"
)

// CollectHost reads the host description. Unreadable fields stay zero: a
// benchmark must not fail because /proc/sys is hidden in a container.
func CollectHost() Host {
	h := Host{
		CPUs:         runtime.NumCPU(),
		GoVersion:    runtime.Version(),
		GOMAXPROCS:   runtime.GOMAXPROCS(0),
		MaxDgramQlen: readInt("/proc/sys/net/unix/max_dgram_qlen"),
		RmemMax:      readInt("/proc/sys/net/core/rmem_max"),
		RmemDefault:  readInt("/proc/sys/net/core/rmem_default"),
		MqMsgMax:     readInt("/proc/sys/fs/mqueue/msg_max"),
		MqMsgsizeMax: readInt("/proc/sys/fs/mqueue/msgsize_max"),
		MqQueuesMax:  readInt("/proc/sys/fs/mqueue/queues_max"),
	}
	h.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				h.ModelName = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return h
}

func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// NewResult starts a Result of the given kind with the host filled in.
func NewResult(kind string, params any) *Result {
	return &Result{Kind: kind, Started: time.Now(), Host: CollectHost(), Params: params, Command: os.Args}
}

// WriteJSON writes r, indented, to path; "-" means stdout. The file is
// written to a temporary name and renamed so a reader never sees half.
func (r *Result) WriteJSON(path string) error {
	if r.Finished.IsZero() {
		r.Finished = time.Now()
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s result: %w", r.Kind, err)
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// ReadResult decodes a Result from r. params and rows must be pointers to
// the kind-specific types (or nil to leave them as generic JSON values);
// callers that do not know the kind yet can decode twice, or pass
// *json.RawMessage for both.
func ReadResult(rd io.Reader, params, rows any) (*Result, error) {
	res := &Result{Params: params, Rows: rows}
	if err := json.NewDecoder(rd).Decode(res); err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	return res, nil
}
