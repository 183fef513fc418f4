package conns

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procStatus is what /proc/PID/status says about a process's threads and
// memory.
type procStatus struct {
	Threads int
	RSSKiB  int64 // VmRSS
	HWMKiB  int64 // VmHWM: the peak RSS since the process started
}

// parseStatus reads Threads, VmRSS and VmHWM from the text of
// /proc/PID/status. A field that is absent stays zero (a kernel thread
// has no Vm* lines); a present field that does not parse is an error.
func parseStatus(b []byte) (procStatus, error) {
	var s procStatus
	threads := false
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(key) {
		case "Threads":
			n, err := strconv.Atoi(string(bytes.TrimSpace(val)))
			if err != nil {
				return s, fmt.Errorf("status Threads %q: %w", val, err)
			}
			s.Threads, threads = n, true
			continue
		case "VmRSS":
			dst = &s.RSSKiB
		case "VmHWM":
			dst = &s.HWMKiB
		default:
			continue
		}
		f := strings.Fields(string(val)) // "   12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return s, fmt.Errorf("status %s %q: want N kB", key, val)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return s, fmt.Errorf("status %s %q: %w", key, val, err)
		}
		*dst = n
	}
	if !threads {
		return s, errors.New("status has no Threads line")
	}
	return s, nil
}

func readStatus(pid int) (procStatus, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procStatus{}, err
	}
	return parseStatus(b)
}

// parseNoFileLimit reads the soft and hard "Max open files" limits from the
// text of /proc/PID/limits: what the daemon really runs with, as opposed
// to what this process set before starting it.
func parseNoFileLimit(b []byte) (soft, hard uint64, err error) {
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Max open files")
		if !ok {
			continue
		}
		f := strings.Fields(rest) // soft hard units
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("limits line %q: want soft and hard", line)
		}
		parse := func(s string) (uint64, error) {
			if s == "unlimited" {
				return ^uint64(0), nil
			}
			return strconv.ParseUint(s, 10, 64)
		}
		if soft, err = parse(f[0]); err != nil {
			return 0, 0, fmt.Errorf("limits line %q: %w", line, err)
		}
		if hard, err = parse(f[1]); err != nil {
			return 0, 0, fmt.Errorf("limits line %q: %w", line, err)
		}
		return soft, hard, nil
	}
	return 0, 0, errors.New("limits has no Max open files line")
}

func readNoFileLimit(pid int) (soft, hard uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0, 0, err
	}
	return parseNoFileLimit(b)
}

// countFDs counts the entries of /proc/PID/fd. Names are read in chunks
// so that 50,000 descriptors do not become one 50,000-string slice.
func countFDs(pid int) (int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(4096)
		n += len(names)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// hasCapSysResource reports whether this process may raise its hard
// limits: root without CAP_SYS_RESOURCE (a container or sandbox that
// drops it from the bounding set) may not.
func hasCapSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "CapEff:"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			return err == nil && v&(1<<capSysResource) != 0
		}
	}
	return false
}

// capSysResource is CAP_SYS_RESOURCE's bit (linux/capability.h).
const capSysResource = 24

// fdLimit sets this process's RLIMIT_NOFILE for one cell at a time, so the
// daemon started next inherits it: Go restores the limit it found at
// start-up in the processes it starts, unless the program called
// syscall.Setrlimit, as set does.
type fdLimit struct {
	orig   syscall.Rlimit
	nrOpen uint64 // fs.nr_open: no process may have more (0: unknown)
}

func newFDLimit() (*fdLimit, error) {
	l := &fdLimit{}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l.orig); err != nil {
		return nil, fmt.Errorf("getrlimit RLIMIT_NOFILE: %w", err)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		l.nrOpen, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	return l, nil
}

// set makes the soft and hard limits need (never less than the limits the
// process started with, capped at fs.nr_open) and returns the soft limit
// now in force. capped says it is below need: fs.nr_open is lower, or the
// hard limit could not be raised (not root), in which case the soft limit
// is the hard one.
func (l *fdLimit) set(need uint64) (limit uint64, capped bool, err error) {
	want := max(need, l.orig.Cur)
	if l.nrOpen > 0 && want > l.nrOpen {
		want = l.nrOpen
	}
	err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: max(want, l.orig.Max)})
	if errors.Is(err, syscall.EPERM) {
		// Raising a hard limit takes CAP_SYS_RESOURCE: go as far as
		// the hard limit allows.
		want = min(want, l.orig.Max)
		err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: l.orig.Max})
	}
	if err != nil {
		return 0, false, fmt.Errorf("setrlimit RLIMIT_NOFILE %d: %w", want, err)
	}
	return want, want < need, nil
}

// restore puts back the limits the process started with.
func (l *fdLimit) restore() error {
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l.orig)
}

// tcpStates names the states of /proc/net/tcp (include/net/tcp_states.h).
var tcpStates = map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
	"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}

// tcpPeersOf lists "remote-address STATE" for the IPv4 TCP sockets in
// text (/proc/net/tcp) whose local port is port, listening sockets left
// out: who still holds a connection to a listener the aggregator should
// have none on.
func tcpPeersOf(text []byte, port int) []string {
	var out []string
	for _, line := range strings.Split(string(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		_, lport, ok := strings.Cut(f[1], ":")
		if p, err := strconv.ParseUint(lport, 16, 16); !ok || err != nil || int(p) != port || f[3] == "0A" {
			continue
		}
		raddr, rport, _ := strings.Cut(f[2], ":")
		a, err1 := strconv.ParseUint(raddr, 16, 32) // little-endian on x86: 0100007F is 127.0.0.1
		p, err2 := strconv.ParseUint(rport, 16, 16)
		if err1 != nil || err2 != nil {
			continue
		}
		state := tcpStates[f[3]]
		if state == "" {
			state = f[3]
		}
		out = append(out, fmt.Sprintf("%d.%d.%d.%d:%d %s", byte(a), byte(a>>8), byte(a>>16), byte(a>>24), p, state))
	}
	return out
}

// userHZ is the unit of /proc/PID/stat times: USER_HZ, 100 on Linux
// whatever the kernel's HZ.
const userHZ = 100

// parseStatCPU returns the user plus system CPU time of all of a process's
// threads from the text of /proc/PID/stat.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	f := strings.Fields(string(b[i+1:])) // from field 3, state
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the name", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

func readCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}
