package bufsweep

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Profile is one network fault: a fixed delay, a jitter around it and a
// bandwidth limit (zero fields are off).
type Profile struct {
	Delay  time.Duration `json:"delay"`
	Jitter time.Duration `json:"jitter"`
	// RateKBps is the bandwidth limit in KB/s, KB = 1000 bytes
	// (toxiproxy's unit).
	RateKBps int64 `json:"rate_kbps"`
}

// Profiles are the named fault profiles (seed 003's delays, plus a
// bandwidth limit, which seed 003 did not try but a sidecar link may have).
var Profiles = map[string]Profile{
	"none":         {},
	"delay1ms":     {Delay: time.Millisecond},
	"delay5ms":     {Delay: 5 * time.Millisecond},
	"delay10ms":    {Delay: 10 * time.Millisecond},
	"delay100ms":   {Delay: 100 * time.Millisecond, Jitter: 10 * time.Millisecond},
	"bw10MBps":     {RateKBps: 10_000},
	"delay5ms+bw1": {Delay: 5 * time.Millisecond, RateKBps: 1_000},
}

// DefaultFaults are the profiles a full fault sweep runs; QuickFaults a
// short one.
var (
	DefaultFaults = []string{"none", "delay5ms", "delay10ms", "delay100ms", "bw10MBps"}
	QuickFaults   = []string{"none", "delay1ms"}
)

// ProfileNames lists Profiles' names, sorted.
func ProfileNames() []string {
	var n []string
	for k := range Profiles {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

var nsSeq atomic.Int64

func nsName() string {
	return "lgbuf" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(nsSeq.Add(1), 10)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// NetemAvailable reports whether a netem qdisc can be added to lo in a
// private network namespace (needs root, ip and tc, and the sch_netem
// module). why explains a false answer.
func NetemAvailable(ctx context.Context) (ok bool, why string) {
	if os.Geteuid() != 0 {
		return false, "not root"
	}
	for _, c := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(c); err != nil {
			return false, c + " not installed"
		}
	}
	ns := nsName()
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return false, err.Error()
	}
	defer run(context.Background(), "ip", "netns", "del", ns)
	if err := run(ctx, "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// netemArgs renders p as tc netem arguments.
func netemArgs(p Profile) []string {
	a := []string{"netem"}
	if p.Delay > 0 {
		a = append(a, "delay", fmt.Sprintf("%dus", p.Delay.Microseconds()))
		if p.Jitter > 0 {
			// Seed 003's burst profile: 25% correlation with the last delay.
			a = append(a, fmt.Sprintf("%dus", p.Jitter.Microseconds()), "25%")
		}
	}
	if p.RateKBps > 0 {
		a = append(a, "rate", fmt.Sprintf("%dkbit", p.RateKBps*8))
	}
	return a
}

// netemPair creates a TCP pair inside a new network namespace whose lo
// carries netem with profile p. Sockets keep the namespace they were made
// in, so only their creation happens on a thread switched into it.
func netemPair(ctx context.Context, p Profile) (*endpoints, error) {
	ns := nsName()
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return nil, err
	}
	del := func() { run(context.Background(), "ip", "netns", "del", ns) }
	if err := run(ctx, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"); err != nil {
		del()
		return nil, err
	}
	args := append([]string{"netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root"}, netemArgs(p)...)
	if err := run(ctx, "ip", args...); err != nil {
		del()
		return nil, err
	}
	type res struct {
		ep  *endpoints
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// This thread's namespace is changed and not restored: it is
		// locked and never unlocked, so the runtime discards it at exit.
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		ep, err := tcpPair(nil)
		ch <- res{ep, err}
	}()
	r := <-ch
	if r.err != nil {
		del()
		return nil, r.err
	}
	inner := r.ep.cleanup
	r.ep.cleanup = func() { inner(); del() }
	r.ep.via = "netem"
	return r.ep, nil
}

// toxiPair puts an in-process toxiproxy between writer and reader with p's
// toxics on the writer-to-reader ("upstream") direction.
func toxiPair(p Profile) (*endpoints, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	via := func(upstream string) (string, func(), error) {
		px := toxiproxy.NewProxy(server, "bufsweep", "127.0.0.1:0", upstream)
		if err := px.Start(); err != nil {
			return "", nil, fmt.Errorf("toxiproxy: %w", err)
		}
		var toxics []string
		if p.Delay > 0 {
			toxics = append(toxics, fmt.Sprintf(`{"name":"lat","type":"latency","stream":"upstream","attributes":{"latency":%d,"jitter":%d}}`,
				p.Delay.Milliseconds(), p.Jitter.Milliseconds()))
		}
		if p.RateKBps > 0 {
			toxics = append(toxics, fmt.Sprintf(`{"name":"bw","type":"bandwidth","stream":"upstream","attributes":{"rate":%d}}`, p.RateKBps))
		}
		for _, tx := range toxics {
			if _, err := px.Toxics.AddToxicJson(strings.NewReader(tx)); err != nil {
				px.Stop()
				return "", nil, fmt.Errorf("toxiproxy toxic %s: %w", tx, err)
			}
		}
		return px.Listen, px.Stop, nil
	}
	ep, err := tcpPair(via)
	if err != nil {
		return nil, err
	}
	ep.via = "toxiproxy"
	return ep, nil
}
