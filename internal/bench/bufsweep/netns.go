package bufsweep

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// NetnsChildSubcommand is the hidden subcommand a binary must route to
// NetnsChild: Run re-executes /proc/self/exe with it, in a new network
// namespace, to measure the loss rows there.
const NetnsChildSubcommand = "_bufsweep-netns"

// nftTable is the table the child installs in its namespace.
const nftTable = "bufsweep"

// ErrNotPrivateNetns is returned by NetnsChild when it runs in its
// parent's network namespace: its rules would then touch the host.
var ErrNotPrivateNetns = errors.New("not in a private network namespace")

// lossJob is what Run asks the child to measure: every loss profile ×
// size, in that order, each once.
type lossJob struct {
	Faults     []lossFault `json:"faults"`
	Sizes      []int       `json:"sizes"`
	Volume     int         `json:"volume"`
	RecordSize int         `json:"record_size"`
}

type lossFault struct {
	Name string `json:"name"`
	// Permyriad of the TCP packets to drop (0: count only).
	Permyriad int `json:"permyriad"`
}

// lossResult is one measurement of the child, in job order.
type lossResult struct {
	Fault  string `json:"fault"`
	Buffer int    `json:"buffer"`
	Sample sample `json:"sample"`
}

// lossUnavailable says why loss rows cannot run here, "" when they can.
func lossUnavailable() string {
	if os.Geteuid() != 0 {
		return "needs root (a private network namespace and nftables rules)"
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return "nft not installed"
	}
	return ""
}

// measureLossRows measures, once, every EngineNftNetns row in one child
// process living in a new network namespace, and appends the samples.
func measureLossRows(ctx context.Context, o *Options, rows []Row, samples [][]sample) error {
	job := lossJob{Sizes: o.Sizes, Volume: o.Volume, RecordSize: o.RecordSize}
	type key struct {
		fault  string
		buffer int
	}
	at := map[key]int{} // row index
	for i, r := range rows {
		if r.Engine != EngineNftNetns {
			continue
		}
		if !slices.ContainsFunc(job.Faults, func(f lossFault) bool { return f.Name == r.Fault }) {
			job.Faults = append(job.Faults, lossFault{Name: r.Fault, Permyriad: Profiles[r.Fault].lossPermyriad()})
		}
		at[key{r.Fault, r.Buffer}] = i
	}
	if len(job.Faults) == 0 {
		return nil
	}
	o.Progress.SetLabel(fmt.Sprintf("tcp %d loss rows in a private network namespace", len(job.Faults)*len(job.Sizes)))
	results, err := runNetnsChild(ctx, job)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for i, r := range rows {
		if r.Engine == EngineNftNetns && err != nil {
			samples[i] = append(samples[i], sample{Err: err.Error()})
		}
	}
	for _, lr := range results {
		if i, ok := at[key{lr.Fault, lr.Buffer}]; ok {
			samples[i] = append(samples[i], lr.Sample)
		}
	}
	o.Progress.Add(int64(len(job.Faults) * len(job.Sizes)))
	return nil
}

// runNetnsChild runs job in this binary re-executed in a new network
// namespace (CLONE_NEWNET): the namespace, its lo and its nftables rules
// die with the child, so nothing is left on the host even if it crashes.
func runNetnsChild(ctx context.Context, job lossJob) ([]lossResult, error) {
	in, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("encode loss job: %w", err)
	}
	cmd := exec.CommandContext(ctx, "/proc/self/exe", NetnsChildSubcommand)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	cmd.Stdin = bytes.NewReader(in)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("loss rows in a new network namespace: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var results []lossResult
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		return nil, fmt.Errorf("loss rows: decode the child's answer: %w", err)
	}
	if want := len(job.Faults) * len(job.Sizes); len(results) != want {
		return nil, fmt.Errorf("loss rows: the child measured %d rows, want %d", len(results), want)
	}
	return results, nil
}

// NetnsChild is the child side of the loss rows. It must run in a network
// namespace of its own (runNetnsChild clones one) and refuses otherwise
// (ErrNotPrivateNetns). It reads a job as JSON from in, brings lo up, and
// for each loss profile installs the drop rule, measures every buffer size
// over TCP on lo with the rule's counters and TCP's retransmission counters
// read around each measurement, and writes the results as JSON to out.
func NetnsChild(ctx context.Context, in io.Reader, out io.Writer) error {
	if err := requirePrivateNetns(); err != nil {
		return err
	}
	var job lossJob
	if err := json.NewDecoder(in).Decode(&job); err != nil {
		return fmt.Errorf("decode loss job: %w", err)
	}
	if err := setLoopbackUp(); err != nil {
		return err
	}
	var results []lossResult
	for _, f := range job.Faults {
		if err := nft(ctx, lossRuleset(f.Permyriad)); err != nil {
			return err
		}
		for _, size := range job.Sizes {
			if err := ctx.Err(); err != nil {
				return err
			}
			results = append(results, lossResult{Fault: f.Name, Buffer: size, Sample: measureWithCounters(ctx, size, job)})
		}
	}
	return json.NewEncoder(out).Encode(results)
}

// measureWithCounters is measureOnce over plain TCP with the deltas of the
// nftables counters and the TCP retransmission counters around it.
func measureWithCounters(ctx context.Context, size int, job lossJob) sample {
	c0, err := nftCounters(ctx)
	if err != nil {
		return sample{Err: err.Error()}
	}
	r0, err := tcpRetransmitCounters()
	if err != nil {
		return sample{Err: err.Error()}
	}
	s := measureOnce("tcp", Profile{Engine: EngineNftNetns}, size, job.Volume, job.RecordSize, "")
	c1, err := nftCounters(ctx)
	if err == nil {
		var r1 retransmitCounters
		r1, err = tcpRetransmitCounters()
		s.Retransmits = r1.segments - r0.segments
		s.Duplicates = r1.duplicates - r0.duplicates
	}
	if err != nil && s.Err == "" {
		s.Err = err.Error()
	}
	s.TCPPackets, s.Dropped = c1["seen"]-c0["seen"], c1["dropped"]-c0["dropped"]
	return s
}

// requirePrivateNetns fails unless this process's network namespace
// differs from its parent's.
func requirePrivateNetns() error {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return fmt.Errorf("own network namespace: %w", err)
	}
	parent, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/ns/net")
	if err != nil {
		return fmt.Errorf("parent's network namespace: %w", err)
	}
	if self == parent {
		return fmt.Errorf("%w: %s is the parent's (%s runs only as Run's child)", ErrNotPrivateNetns, self, NetnsChildSubcommand)
	}
	return nil
}

// setLoopbackUp brings lo up: a new namespace's lo starts down.
func setLoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// lossRuleset replaces the table with one counting every TCP packet lo
// delivers ("seen") and dropping permyriad/10000 of them ("dropped"). Each
// packet draws its own random number: loss is per packet, independent.
// The input hook, not output: the sender must believe the packet left, as
// on a real link (see EngineNftNetns).
// The add-then-delete makes the delete safe when the table does not exist.
func lossRuleset(permyriad int) string {
	drop := ""
	if permyriad > 0 {
		drop = fmt.Sprintf("\t\tmeta l4proto tcp numgen random mod 10000 < %d counter name \"dropped\" drop\n", permyriad)
	}
	return fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\ntable inet %[1]s {\n"+
		"\tcounter seen {}\n\tcounter dropped {}\n"+
		"\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n"+
		"\t\tmeta l4proto tcp counter name \"seen\"\n%[2]s\t}\n}\n", nftTable, drop)
}

// nft runs `nft -f -` with script.
func nft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// nftCounters reads the packet counts of the table's named counters.
func nftCounters(ctx context.Context) (map[string]int64, error) {
	out, err := exec.CommandContext(ctx, "nft", "list", "counters", "table", "inet", nftTable).Output()
	if err != nil {
		return nil, fmt.Errorf("nft list counters: %w", err)
	}
	return parseNftCounters(out)
}

// parseNftCounters reads `nft list counters` text: "counter NAME {" lines
// each followed by "packets N bytes M".
func parseNftCounters(text []byte) (map[string]int64, error) {
	counts := map[string]int64{}
	name := ""
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && f[0] == "counter":
			name = f[1]
		case len(f) >= 2 && f[0] == "packets" && name != "":
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("nft counter %s: %w", name, err)
			}
			counts[name] = n
		}
	}
	if _, ok := counts["seen"]; !ok {
		return nil, fmt.Errorf("nft counters: no \"seen\" counter in %q", text)
	}
	return counts, nil
}

// retransmitCounters are the namespace's TCP counters that tell a
// retransmission of something lost from one of something not lost.
type retransmitCounters struct {
	segments   int64 // Tcp RetransSegs: segments sent again, for any reason
	duplicates int64 // TcpExt TCPDSACKOldSent + TCPDSACKOfoSent: segments the receiver already had
}

// tcpRetransmitCounters reads them from this namespace's /proc/net/snmp and
// /proc/net/netstat.
func tcpRetransmitCounters() (retransmitCounters, error) {
	snmp, err := procNetCounters("/proc/net/snmp", "Tcp:", "RetransSegs")
	if err != nil {
		return retransmitCounters{}, err
	}
	ext, err := procNetCounters("/proc/net/netstat", "TcpExt:", "TCPDSACKOldSent", "TCPDSACKOfoSent")
	if err != nil {
		return retransmitCounters{}, err
	}
	return retransmitCounters{segments: snmp[0], duplicates: ext[0] + ext[1]}, nil
}

// procNetCounters reads the named counters of one group (a header line of
// names followed by a line of values, both starting with group) of a
// /proc/net/snmp-style file.
func procNetCounters(path, group string, names ...string) ([]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var header []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != group {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		values := make([]int64, len(names))
		for j, name := range names {
			i := slices.Index(header, name)
			if i < 0 || i >= len(f) {
				return nil, fmt.Errorf("%s has no %s %s", path, group, name)
			}
			if values[j], err = strconv.ParseInt(f[i], 10, 64); err != nil {
				return nil, fmt.Errorf("%s %s %s: %w", path, group, name, err)
			}
		}
		return values, nil
	}
	return nil, fmt.Errorf("%s has no %s counters", path, group)
}
