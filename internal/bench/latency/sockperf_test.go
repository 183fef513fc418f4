package latency

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/testenv"
)

// sockperf is an independent check of the raw rows: Mellanox's fixed-rate
// latency tool (Debian's sockperf 3.7). `sockperf ul --reply-every 1` sends
// at a fixed rate from a thread that spins between sends, receives the
// replies on a second thread, and reports latency as half the round trip
// measured from the time each message actually left; with --full-rtt it
// reports the whole round trip. `sockperf sr` is its echo server.
//
// Agreement is checked on the round trip at p50 and p99: ours is measured
// from the scheduled send, sockperf's from the actual send, so they agree
// only if our sender keeps its schedule, which is what this test is for
// (the sender that slept until each due time reported ~40 µs one way where
// sockperf found 5–30 µs).

// sockperfRun is one sockperf under-load run's round-trip percentiles, µs.
type sockperfRun struct {
	p50, p99 float64
	n        int
}

var spPercentile = regexp.MustCompile(`percentile\s+([0-9.]+)\s*=\s*([0-9.]+)`)
var spObservations = regexp.MustCompile(`Total (\d+) observations`)

// parseSockperf reads the round-trip percentiles of `sockperf ul
// --full-rtt` from its output.
func parseSockperf(out string) (sockperfRun, error) {
	var r sockperfRun
	for _, m := range spPercentile.FindAllStringSubmatch(out, -1) {
		p, _ := strconv.ParseFloat(m[1], 64)
		v, _ := strconv.ParseFloat(m[2], 64)
		switch p {
		case 50:
			r.p50 = v
		case 99:
			r.p99 = v
		}
	}
	if m := spObservations.FindStringSubmatch(out); m != nil {
		r.n, _ = strconv.Atoi(m[1])
	}
	if r.p50 == 0 || r.p99 == 0 || r.n == 0 {
		return r, fmt.Errorf("no percentiles in sockperf's output:\n%s", out)
	}
	return r, nil
}

func TestParseSockperf(t *testing.T) {
	out := `sockperf: ====> avg-rtt=14.301 (std-dev=3.822)
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Round trip is 14.301 usec
sockperf: Total 59001 observations; each percentile contains 590.01 observations
sockperf: ---> <MAX> observation =  203.437
sockperf: ---> percentile 99.999 =  190.010
sockperf: ---> percentile 99.990 =  120.003
sockperf: ---> percentile 99.900 =   60.115
sockperf: ---> percentile 99.000 =   28.553
sockperf: ---> percentile 90.000 =   17.220
sockperf: ---> percentile 75.000 =   15.001
sockperf: ---> percentile 50.000 =   12.957
sockperf: ---> percentile 25.000 =   11.904
sockperf: ---> <MIN> observation =   10.112
`
	r, err := parseSockperf(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.p50 != 12.957 || r.p99 != 28.553 || r.n != 59001 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parseSockperf("sockperf: No valid observations found."); err == nil {
		t.Fatal("no error for output without percentiles")
	}
}

// freePort returns a loopback port nothing listens on for network
// ("tcp" or "udp"), closed again for sockperf to take.
func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pinned prefixes argv with taskset for cpu (-1: unpinned).
func pinned(taskset string, cpu int, argv ...string) []string {
	if cpu < 0 {
		return argv
	}
	return append([]string{taskset, "-c", strconv.Itoa(cpu)}, argv...)
}

// runSockperf runs `sockperf sr` and `sockperf ul` for transport at rate
// and size for d, placed as pl (the server where our echo goes, the
// client's sender and receiver threads where ours go), and returns the
// round-trip percentiles.
func runSockperf(ctx context.Context, t *testing.T, sp, taskset, transport string, pl placement, rate, size int, d time.Duration) sockperfRun {
	t.Helper()
	port := strconv.Itoa(freePort(t, transport))
	proto := []string{}
	if transport == "tcp" {
		proto = []string{"--tcp"}
	}
	srArgv := pinned(taskset, pl.echo, append([]string{sp, "sr", "-i", "127.0.0.1", "-p", port}, proto...)...)
	sr := exec.CommandContext(ctx, srArgv[0], srArgv[1:]...)
	out, err := sr.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sr.Stderr = sr.Stdout
	if err := sr.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = sr.Process.Kill()
		_ = sr.Wait()
	}()
	// sockperf sr says it blocks on its socket once it serves.
	ready := make(chan error, 1)
	go func() {
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadString('\n')
			if strings.Contains(line, "block on socket") {
				ready <- nil
				_, _ = io.Copy(io.Discard, br)
				return
			}
			if err != nil {
				ready <- fmt.Errorf("sockperf sr ended before serving: %w", err)
				return
			}
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sockperf sr not serving within 10s")
	}
	secs := strconv.Itoa(int(math.Ceil(d.Seconds())))
	ulArgv := append([]string{sp, "ul", "-i", "127.0.0.1", "-p", port,
		"--mps", strconv.Itoa(rate), "-m", strconv.Itoa(size), "--reply-every", "1", "-t", secs, "--full-rtt"}, proto...)
	if pl.sender >= 0 {
		// sockperf 3.7 applies both options to its main thread, the
		// sender (os_set_affinity in src/os_abstract.cpp pins
		// pthread_self(), whatever thread it is given), and the receiver
		// thread, started between the two calls, inherits the first:
		// --sender-affinity ends up on the receiver and
		// --receiver-affinity on the sender. Hence the swap, and the
		// check below of where the threads really are.
		ulArgv = append(ulArgv, "--sender-affinity", strconv.Itoa(pl.receiver), "--receiver-affinity", strconv.Itoa(pl.sender))
	}
	ul := exec.CommandContext(ctx, ulArgv[0], ulArgv[1:]...)
	ulOut, err := ul.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ul.Stderr = ul.Stdout
	if err := ul.Start(); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	br := bufio.NewReader(ulOut)
	placed := pl.sender < 0
	for {
		line, err := br.ReadString('\n')
		all.WriteString(line)
		if !placed && strings.Contains(line, "Starting test") {
			// Both threads exist and sockperf has pinned them.
			if where := sockperfThreads(ul.Process.Pid); where != fmt.Sprintf("sender %d, receiver %d", pl.sender, pl.receiver) {
				_ = ul.Process.Kill()
				_ = ul.Wait()
				t.Fatalf("sockperf ul placed its threads as %s, want sender %d, receiver %d (a sockperf that fixed its affinity options? see runSockperf)",
					where, pl.sender, pl.receiver)
			}
			placed = true
		}
		if err != nil {
			break
		}
	}
	if err := ul.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(ulArgv, " "), err, all.String())
	}
	r, err := parseSockperf(all.String())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sockperfThreads says which CPUs sockperf ul's threads are allowed:
// "sender C, receiver C" (the sender is the main thread).
func sockperfThreads(pid int) string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err.Error()
	}
	var sender, receiver []string
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				if task.Name() == strconv.Itoa(pid) {
					sender = append(sender, strings.TrimSpace(v))
				} else {
					receiver = append(receiver, strings.TrimSpace(v))
				}
			}
		}
	}
	return fmt.Sprintf("sender %s, receiver %s", strings.Join(sender, "+"), strings.Join(receiver, "+"))
}

// runIpcbench runs `ipcbench latency --mode raw` for one transport and
// placement and returns its row.
func runIpcbench(ctx context.Context, t *testing.T, bin, transport, place string, rate, size int, d time.Duration) Row {
	t.Helper()
	out := filepath.Join(t.TempDir(), "latency.json")
	argv := []string{bin, Kind, "--mode", ModeRaw, "--transport", transport, "--placement", place,
		"--rate", strconv.Itoa(rate), "--size", strconv.Itoa(size), "--duration", d.String(), "--warmup", "1s", "--json", out}
	if b, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []Row
	if _, err := bench.ReadResult(f, nil, &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Error != "" || rows[0].RoundTrip == nil || rows[0].SendLag == nil || rows[0].RoundTripFromSend == nil {
		t.Fatalf("want one measured raw row with round trips and the sender's lateness, got %+v", rows)
	}
	return rows[0]
}

// within says whether ours is within ±tol of ref.
func within(ours, ref, tol float64) bool { return math.Abs(ours-ref) <= tol*ref }

// TestAgreesWithSockperf runs sockperf and our raw rows at seed 002's rate
// and size (20,000/s of 4 KiB), in the same placement, for TCP and UDP,
// and requires the round trips to agree within ±15 % at p50 and our
// sender's median lateness to stay under 2 µs. The p99 of both is logged,
// not compared.
//
// Why not p99: on this VM the p99 of either tool swings by 2-10× from one
// 3-second run to the next (a host exit, a timer tick, another process):
// across eighteen back-to-back pairs sockperf's ranged 103 µs-43 ms and
// ours 129 µs-2.9 ms, each above the other about as often, and in one CI
// run ours was 1.6-4.5× sockperf's in three pairs running. A bound loose
// enough never to fail on that would test nothing. What the test guards
// is the fault this lab had, an instrument that adds its own delay to
// every message (the sleeping sender read 60 % above sockperf's round trip
// at p50 and 7× its one-way figure): the median and the sender's own
// lateness catch that.
//
// Placement cross: each tool's sender alone on one CPU, the echo server
// and the receiver on the other. Not same: sockperf's sender spins
// without yielding, so with everything on one CPU its server and receiver
// wait for the scheduler's tick whenever they wake during a spin, and its
// p99 round trip there is ~4 ms, sockperf's own doing (ours yields while
// it spins; see pacer).
//
// Duration: 3 s measured per run (ours after 1 s of warm-up; sockperf
// adds its own warm-up and a 2 s pause), about 8 s per attempt and
// transport. That gives 60,000 observations, 600 beyond p99. Another
// process that runs during one tool's run and not the other's moves even
// the median, so each transport gets up to three attempts (sockperf, then
// ours, back to back) and passes on the first that agrees. When none
// does, the least p50 of each tool over the attempts is compared, as is
// our least sender lateness: interference only adds delay, so the least
// median is each tool's undisturbed figure (in one CI run, with a build
// beside it, the pairs were 2925/41, 49/434 and 40/2281 µs: each tool
// disturbed in turn, both at 40 µs undisturbed). A sender that cannot
// keep its schedule (the old one was 25 µs late at p50 here) disagrees
// in every attempt and in the least figures too.
func TestAgreesWithSockperf(t *testing.T) {
	if testing.Short() {
		t.Skip("runs sockperf and ipcbench for ~20 s")
	}
	sp := testenv.RequireCommand(t, "sockperf")
	// The built command, not Run in this test process: under -race (as CI
	// runs the tests) every Go instruction of the sender, the receiver and
	// the echo costs several times as much, which is not what either tool
	// measures.
	ipcbench := testenv.Binary(t, "ipcbench")
	taskset := testenv.RequireCommand(t, "taskset")
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		testenv.SkipOrFail(t, fmt.Sprintf("needs two CPUs, allowed %v", cpus))
	}
	plan, _, err := planPlacements([]string{PlaceCross}, cpus)
	if err != nil {
		t.Fatal(err)
	}
	pl := plan[0]
	const (
		rate     = 20000
		size     = 4096
		dur      = 3 * time.Second
		tol      = 0.15
		attempts = 3
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, tr := range []string{"tcp", "udp"} {
		t.Run(tr, func(t *testing.T) {
			var tried []string
			leastOurs, leastRef, leastLate := math.Inf(1), math.Inf(1), math.Inf(1)
			for a := 1; a <= attempts; a++ {
				ref := runSockperf(ctx, t, sp, taskset, tr, pl, rate, size, dur)
				r := runIpcbench(ctx, t, ipcbench, tr, pl.name, rate, size, dur)
				p50, p99 := r.RoundTrip.P50/1e3, r.RoundTrip.P99/1e3
				line := fmt.Sprintf("attempt %d: round trip p50 %.1f µs, p99 %.1f µs (ours, from the schedule; %.1f / %.1f from the actual send; "+
					"sender late p50 %s, p99 %s) against sockperf's %.1f / %.1f µs (%d observations)",
					a, p50, p99, r.RoundTripFromSend.P50/1e3, r.RoundTripFromSend.P99/1e3,
					bench.FormatNs(r.SendLag.P50), bench.FormatNs(r.SendLag.P99), ref.p50, ref.p99, ref.n)
				t.Log(line)
				tried = append(tried, line)
				if within(p50, ref.p50, tol) && r.SendLag.P50 < 2000 {
					return
				}
				leastOurs, leastRef, leastLate = min(leastOurs, p50), min(leastRef, ref.p50), min(leastLate, r.SendLag.P50)
			}
			if within(leastOurs, leastRef, tol) && leastLate < 2000 {
				t.Logf("no attempt agreed; the least p50s do: ours %.1f µs, sockperf's %.1f µs, sender late %s",
					leastOurs, leastRef, bench.FormatNs(leastLate))
				return
			}
			t.Fatalf("%s %s: ipcbench latency and sockperf disagree (p50 beyond ±%.0f%%, or the sender late) in %d attempts, "+
				"and in the least p50s (ours %.1f µs, sockperf's %.1f µs, sender late %s):\n%s",
				tr, pl.name, 100*tol, attempts, leastOurs, leastRef, bench.FormatNs(leastLate), strings.Join(tried, "\n"))
		})
	}
}
