package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Errors returned by the checks that run before bpftrace starts; test them
// with errors.Is.
var (
	ErrNotRoot          = errors.New("bpftrace needs root (CAP_BPF, CAP_PERFMON): run as root or with sudo")
	ErrNoBpftrace       = errors.New("bpftrace not found on PATH: install it with `apt-get install -y bpftrace`")
	ErrNoTracefs        = errors.New("tracefs is not mounted at /sys/kernel/tracing and mounting it failed")
	ErrProbeUnavailable = errors.New("probe not available on this kernel")
	ErrBadOutput        = errors.New("unexpected bpftrace output")
	ErrNotAttached      = errors.New("bpftrace exited before attaching its probes")
	ErrStopTimeout      = errors.New("bpftrace did not exit after SIGINT")
)

// ProbeError names a probe the script needs and what the kernel lacks for it.
type ProbeError struct {
	Probe string // as written in the script, e.g. "kprobe:tcp_sendmsg"
	Need  string // e.g. "kprobes (CONFIG_KPROBES), which this kernel lacks"
}

func (e *ProbeError) Error() string { return "trace: probe " + e.Probe + ": needs " + e.Need }
func (e *ProbeError) Unwrap() error { return ErrProbeUnavailable }

// TracefsDir is where tracefs is expected (and mounted when missing).
const TracefsDir = "/sys/kernel/tracing"

// Capability bits in /proc/self/status CapEff (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// CheckPrivileges fails with ErrNotRoot unless the process is root or holds
// CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, which implies both).
func CheckPrivileges() error {
	if os.Geteuid() == 0 {
		return nil
	}
	caps, err := effectiveCaps()
	if err == nil && (caps&(1<<capSysAdmin) != 0 || caps&(1<<capBPF) != 0 && caps&(1<<capPerfmon) != 0) {
		return nil
	}
	return fmt.Errorf("trace: %w", ErrNotRoot)
}

func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// LookBpftrace returns the bpftrace binary to run: path if set, else the one
// on PATH.
func LookBpftrace(path string) (string, error) {
	if path == "" {
		path = "bpftrace"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("trace: %w (%w)", ErrNoBpftrace, err)
	}
	return p, nil
}

// EnsureTracefs mounts tracefs at TracefsDir unless it is already there.
// bpftrace reads tracepoint formats from it; a fresh VM may not mount it.
func EnsureTracefs() error {
	if tracefsMounted() {
		return nil
	}
	if err := unix.Mount("tracefs", TracefsDir, "tracefs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("trace: %w: mount -t tracefs tracefs %s: %w", ErrNoTracefs, TracefsDir, err)
	}
	if !tracefsMounted() {
		return fmt.Errorf("trace: %w", ErrNoTracefs)
	}
	return nil
}

func tracefsMounted() bool {
	var st unix.Statfs_t
	return unix.Statfs(TracefsDir, &st) == nil && st.Type == unix.TRACEFS_MAGIC
}

// CheckProbes verifies that every probe the script names exists on this
// kernel, so that a missing feature is named plainly instead of surfacing as
// bpftrace's own message (which, for kprobes on a kernel without them, is
// an uncaught C++ exception about available_filter_functions).
// bpftrace is the binary to ask about kfunc support.
func CheckProbes(script []byte, bpftrace string) error {
	var kfuncOK *bool
	for _, p := range ProbesOf(script) {
		typ, rest, _ := strings.Cut(p, ":")
		switch typ {
		case "tracepoint", "t":
			cat, name, ok := strings.Cut(rest, ":")
			if !ok {
				return &ProbeError{Probe: p, Need: "a tracepoint of the form tracepoint:category:name"}
			}
			matches, _ := filepath.Glob(filepath.Join(TracefsDir, "events", cat, name, "format"))
			if len(matches) == 0 {
				return &ProbeError{Probe: p, Need: "tracepoint " + cat + ":" + name + ", which this kernel does not have (see " + TracefsDir + "/events/" + cat + ")"}
			}
		case "kprobe", "k", "kretprobe", "kr":
			if !exists("/sys/bus/event_source/devices/kprobe") {
				return &ProbeError{Probe: p, Need: "kprobes (CONFIG_KPROBES), which this kernel lacks; use tracepoints instead"}
			}
		case "uprobe", "u", "uretprobe", "ur":
			if !exists("/sys/bus/event_source/devices/uprobe") {
				return &ProbeError{Probe: p, Need: "uprobes (CONFIG_UPROBE_EVENTS), which this kernel lacks"}
			}
		case "kfunc", "f", "kretfunc", "fr", "fentry", "fexit":
			if kfuncOK == nil {
				ok := kfuncSupported(bpftrace)
				kfuncOK = &ok
			}
			if !*kfuncOK {
				return &ProbeError{Probe: p, Need: "kfunc/fentry support (BTF plus a bpftrace built with it); `bpftrace --info` says kfunc: no"}
			}
		}
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func kfuncSupported(bpftrace string) bool {
	out, err := exec.Command(bpftrace, "--info").CombinedOutput()
	return err == nil && bytes.Contains(out, []byte("kfunc: yes"))
}

// probeTypes are the bpftrace probe types (long and short names) whose
// attach points ProbesOf reports.
var probeTypes = map[string]bool{
	"tracepoint": true, "t": true, "kprobe": true, "k": true, "kretprobe": true, "kr": true,
	"uprobe": true, "u": true, "uretprobe": true, "ur": true, "kfunc": true, "f": true,
	"kretfunc": true, "fr": true, "fentry": true, "fexit": true, "usdt": true, "U": true,
	"rawtracepoint": true, "rt": true, "software": true, "s": true, "hardware": true, "h": true,
	"profile": true, "p": true, "interval": true, "i": true, "watchpoint": true, "w": true,
	"iter": true, "it": true, "BEGIN": true, "END": true,
}

// ProbesOf returns the probe specifications of a bpftrace program, in order:
// the comma-separated lists before each top-level action block, without
// predicates. Comments and string literals are skipped.
func ProbesOf(script []byte) []string {
	src := stripComments(script)
	var probes []string
	depth := 0
	var header strings.Builder
	inStr := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if inStr {
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{':
			if depth == 0 {
				probes = append(probes, headerProbes(header.String())...)
				header.Reset()
			}
			depth++
		case '}':
			if depth > 0 {
				depth--
			}
		default:
			if depth == 0 {
				header.WriteByte(c)
			}
		}
	}
	return probes
}

// headerProbes splits "a:b:c, d:e:f /pred/" into its probe specs.
func headerProbes(h string) []string {
	var out []string
	for _, tok := range strings.FieldsFunc(h, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
		if strings.HasPrefix(tok, "/") {
			break // the predicate starts: no probes after it
		}
		// A predicate glued to the probe ("t:a:b/pid == 1/") starts at the first
		// '/' after the last ':' (uprobe paths contain '/' before it).
		if last := strings.LastIndexByte(tok, ':'); last >= 0 {
			if j := strings.IndexByte(tok[last:], '/'); j >= 0 {
				tok = tok[:last+j]
			}
		}
		typ, _, _ := strings.Cut(tok, ":")
		if probeTypes[typ] {
			out = append(out, tok)
		}
	}
	return out
}

func stripComments(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inStr := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr:
			out = append(out, c)
			if c == '\\' && i+1 < len(b) {
				i++
				out = append(out, b[i])
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
			out = append(out, c)
		case c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
			out = append(out, '\n')
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return out
			}
			i += 2 + end + 1
			out = append(out, ' ')
		default:
			out = append(out, c)
		}
	}
	return out
}
