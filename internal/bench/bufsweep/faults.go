package bufsweep

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Engine names what applied a row's fault.
type Engine string

// The fault engines. ADR 0042 explains why delay is per chunk here.
const (
	// EngineNone: no fault, plain loopback in this process's namespace.
	EngineNone Engine = "none"
	// EngineNftNetns: an nftables rule in a private network namespace
	// drops a random share of the TCP packets lo delivers, per packet, in
	// the kernel (what seed 003 did with `tc netem loss`). The rule sits on
	// the input hook: a drop on output is reported to the sending socket
	// (EPERM), which sends the segment again without a retransmission, so
	// it would not be loss (ADR 0042).
	EngineNftNetns Engine = "nftables-netns"
	// EngineToxiproxy: an in-process toxiproxy between writer and reader
	// delays each chunk it reads, not each packet (this kernel has no
	// sch_netem, and nftables has no delay statement).
	EngineToxiproxy Engine = "toxiproxy-per-chunk"
)

// Profile is one network fault. Loss runs on EngineNftNetns; delay,
// jitter and bandwidth on EngineToxiproxy; a profile never mixes the two.
type Profile struct {
	Engine Engine `json:"engine"`
	// LossPercent of the TCP packets lo delivers are dropped: both
	// directions, data and ACKs, as netem on lo drops. 0 on
	// EngineNftNetns is the control row: the namespace and the counting
	// rule, no drop rule.
	LossPercent float64       `json:"loss_percent,omitempty"`
	Delay       time.Duration `json:"delay,omitempty"`
	Jitter      time.Duration `json:"jitter,omitempty"`
	// RateKBps is the bandwidth limit in KB/s, KB = 1000 bytes
	// (toxiproxy's unit).
	RateKBps int64 `json:"rate_kbps,omitempty"`
}

// Profiles are the named fault profiles: seed 003's losses and delays,
// loss0 (the loss rows' control), and a bandwidth limit, which seed 003
// did not try but a sidecar link may have.
var Profiles = map[string]Profile{
	"none":         {Engine: EngineNone},
	"loss0":        {Engine: EngineNftNetns},
	"loss0.1":      {Engine: EngineNftNetns, LossPercent: 0.1},
	"loss1":        {Engine: EngineNftNetns, LossPercent: 1},
	"loss5":        {Engine: EngineNftNetns, LossPercent: 5},
	"delay1ms":     {Engine: EngineToxiproxy, Delay: time.Millisecond},
	"delay5ms":     {Engine: EngineToxiproxy, Delay: 5 * time.Millisecond},
	"delay10ms":    {Engine: EngineToxiproxy, Delay: 10 * time.Millisecond},
	"delay100ms":   {Engine: EngineToxiproxy, Delay: 100 * time.Millisecond, Jitter: 10 * time.Millisecond},
	"bw10MBps":     {Engine: EngineToxiproxy, RateKBps: 10_000},
	"delay5ms+bw1": {Engine: EngineToxiproxy, Delay: 5 * time.Millisecond, RateKBps: 1_000},
}

// DefaultFaults are the profiles a full fault sweep runs: seed 003's five,
// the unfaulted baseline, and loss0, the loss rows' baseline (they run in
// another process and namespace, so "none" is not theirs to compare
// with); QuickFaults a short one.
var (
	DefaultFaults = []string{"none", "loss0", "loss0.1", "loss1", "loss5", "delay5ms", "delay10ms", "delay100ms"}
	QuickFaults   = []string{"none", "loss0", "loss1", "delay1ms"}
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

// Describe says in words what the engine does for p; every row carries it.
func (p Profile) Describe() string {
	switch p.Engine {
	case EngineNftNetns:
		if p.lossPermyriad() == 0 {
			return "private network namespace, nftables counting rule only (control for the loss rows)"
		}
		return fmt.Sprintf("nftables `numgen random mod 10000 < %d drop` (%g %%) on tcp packets lo delivers (input hook) in a private network namespace, per packet, data and ACKs",
			p.lossPermyriad(), p.LossPercent)
	case EngineToxiproxy:
		var parts []string
		if p.Delay > 0 {
			parts = append(parts, fmt.Sprintf("toxiproxy latency toxic %v ±%v, per chunk (not per packet)", p.Delay, p.Jitter))
		}
		if p.RateKBps > 0 {
			parts = append(parts, fmt.Sprintf("toxiproxy bandwidth toxic %d KB/s, per chunk", p.RateKBps))
		}
		return strings.Join(parts, "; ")
	}
	return "plain loopback"
}

// lossPermyriad is LossPercent in hundredths of a percent, the nft rule's
// unit (0.1 % is 10 in 10000).
func (p Profile) lossPermyriad() int { return int(math.Round(p.LossPercent * 100)) }

// toxiproxyVia is a rawchan.TCPOptions.Via that puts an in-process
// toxiproxy between writer and reader with p's toxics on the
// writer-to-reader ("upstream") direction.
func toxiproxyVia(p Profile) func(upstream string) (string, func(), error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	return func(upstream string) (string, func(), error) {
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
}
