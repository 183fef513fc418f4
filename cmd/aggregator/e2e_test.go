package main

// End-to-end tests: the real aggregator binary, the real producer binary and
// util-linux logger, over real sockets and FIFOs.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ipclab/logagg/internal/bench/throughput"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
)

var seedTransportsInOrder = []string{"unixsock", "tcp", "unixgram", "udp", "fifo"}

func isDatagram(t string) bool { return t == "unixgram" || t == "udp" }

// One aggregator serves all five transports at once; two real producers per
// transport send seq-stamped records flat out. Stream transports must
// deliver every record exactly once; on datagram transports whatever is
// missing must be accounted for by the kernel drop counter. The output is
// written with direct I/O (the default), and again through the page cache.
func TestAllTransportsWithRealProducers(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	for _, output := range []struct {
		name string
		args []string
	}{{"direct-io", nil}, {"buffered", []string{"--direct-io=false"}}} {
		t.Run(output.name, func(t *testing.T) { allTransportsWithRealProducers(t, output.args) })
	}
}

func allTransportsWithRealProducers(t *testing.T, aggArgs []string) {
	const perProducer = 3000
	dir := testenv.ShortTempDir(t)
	var aggStderr syncBuffer
	res, err := throughput.Measure(context.Background(), throughput.Spec{
		AggregatorBin: testenv.Binary(t, "aggregator"),
		ProducerBin:   testenv.Binary(t, "producer"),
		Dir:           dir,
		Transports:    seedTransportsInOrder,
		Producers:     2,
		Size:          200,
		Count:         perProducer,
		ExtraArgs:     aggArgs,
		Stderr:        &aggStderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(aggStderr.String(), "direct I/O refused") {
		t.Fatalf("the aggregator did not use direct I/O:\n%s", aggStderr.String())
	}
	var buf bytes.Buffer
	throughput.WriteMeasurement(&buf, res)
	t.Logf("\n%s", buf.String())
	for _, r := range res.Rows {
		if r.Duplicated != 0 {
			t.Errorf("%s: %d duplicated records", r.Transport, r.Duplicated)
		}
		if r.Sent+r.SendFailed != 2*perProducer {
			t.Errorf("%s: producers accounted for %d sent + %d failed, want %d", r.Transport, r.Sent, r.SendFailed, 2*perProducer)
		}
		if isDatagram(r.Transport) {
			if r.Lost != r.KernelDrops {
				t.Errorf("%s: %d records lost but the kernel drop counter says %d", r.Transport, r.Lost, r.KernelDrops)
			}
			continue
		}
		if r.Sent != 2*perProducer || r.Lost != 0 || r.Unique != 2*perProducer {
			t.Errorf("%s: sent %d, unique %d, lost %d; want every one of %d exactly once",
				r.Transport, r.Sent, r.Unique, r.Lost, 2*perProducer)
		}
		if r.Reordered != 0 {
			t.Errorf("%s: %d records reordered within a connection", r.Transport, r.Reordered)
		}
	}
	// Every line must be valid JSON with the enrichment.
	for _, rec := range readRecords(t, res.Output) {
		a := agg(rec)
		if a == nil || a["recv_ns"] == nil || a["transport"] == nil || a["listener"] == nil {
			t.Fatalf("record without enrichment: %v", rec)
		}
	}
}

// util-linux logger as an outside client, in each framing it speaks.
func TestLoggerInterop(t *testing.T) {
	loggerBin := testenv.RequireCommand(t, "logger")
	dir := testenv.ShortTempDir(t)
	p := startAgg(t, dir,
		"--listen", "unix://"+filepath.Join(dir, "s.sock"),
		"--listen", "unixgram://"+filepath.Join(dir, "d.sock"),
		"--listen", "tcp://127.0.0.1:0",
		"--listen", "udp://127.0.0.1:0")
	hostPort := func(scheme string) (string, string) {
		h, port, _ := net.SplitHostPort(strings.TrimPrefix(p.url(scheme), scheme+"://"))
		return h, port
	}
	th, tport := hostPort("tcp")
	uh, uport := hostPort("udp")
	cases := []struct {
		name, transport, format string
		args                    []string
	}{
		{"unix-stream-rfc3164", "unix", "rfc3164", []string{"-u", filepath.Join(dir, "s.sock"), "--rfc3164"}},
		{"unix-stream-rfc5424", "unix", "rfc5424", []string{"-u", filepath.Join(dir, "s.sock"), "--rfc5424"}},
		{"unix-dgram-rfc3164", "unixgram", "rfc3164", []string{"-u", filepath.Join(dir, "d.sock"), "--rfc3164"}},
		{"unix-dgram-rfc5424", "unixgram", "rfc5424", []string{"-u", filepath.Join(dir, "d.sock"), "--rfc5424"}},
		{"tcp-octet-counted", "tcp", "rfc5424", []string{"-T", "-n", th, "-P", tport, "--octet-count", "--rfc5424"}},
		{"tcp-newline", "tcp", "rfc5424", []string{"-T", "-n", th, "-P", tport, "--rfc5424"}},
		{"udp-rfc3164", "udp", "rfc3164", []string{"-d", "-n", uh, "-P", uport, "--rfc3164"}},
		{"udp-rfc5424", "udp", "rfc5424", []string{"-d", "-n", uh, "-P", uport, "--rfc5424"}},
	}
	for _, c := range cases {
		msg := "hello from logger " + c.name
		args := append(append([]string{}, c.args...), "-t", "e2e", "-p", "user.warning", msg)
		if out, err := exec.Command(loggerBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: logger: %v\n%s", c.name, err, out)
		}
	}
	p.waitMetric(float64(len(cases)), "logagg_records_out_total")
	p.stop(syscall.SIGTERM)
	recs := readRecords(t, p.output)
	for _, c := range cases {
		msg := "hello from logger " + c.name
		wantMsg, wantSource := msg, "e2e"
		if c.format == "rfc3164" && c.transport == "unixgram" {
			// --rfc3164 writes a HOSTNAME, which the local datagram socket
			// does not parse (as rsyslog's imuxsock does not): the hostname
			// is taken for the TAG and "e2e:" starts the message.
			wantMsg, wantSource = "e2e: "+msg, ""
		}
		var found map[string]any
		for _, r := range recs {
			if r["message"] == wantMsg {
				found = r
			}
		}
		if found == nil {
			t.Errorf("%s: record %q not in output:\n%s", c.name, wantMsg, describe(recs))
			continue
		}
		a := agg(found)
		if a["transport"] != c.transport || a["format"] != c.format {
			t.Errorf("%s: transport=%v format=%v, want %s %s", c.name, a["transport"], a["format"], c.transport, c.format)
		}
		if found["level"] != "warning" || (wantSource != "" && found["source"] != wantSource) {
			t.Errorf("%s: level=%v source=%v, want warning %s", c.name, found["level"], found["source"], wantSource)
		}
		peer, _ := a["peer"].(map[string]any)
		switch c.transport {
		case "unix", "unixgram":
			if peer == nil || peer["pid"] == nil || peer["via"] != "kernel" {
				t.Errorf("%s: no kernel peer credentials: %v", c.name, a)
			}
		case "tcp", "udp":
			if peer == nil || !strings.HasPrefix(fmt.Sprint(peer["addr"]), "127.0.0.1:") {
				t.Errorf("%s: no peer address: %v", c.name, a)
			}
		}
	}
}

// SIGTERM while producers write flat out: every record a producer's write
// returned success for is in the file. Unix stream sockets make this exact
// (the aggregator shuts the read side down first, so later writes fail with
// EPIPE instead of vanishing); shm rings are marked closed, then drained to
// empty (a later write fails with "ring closed"). POSIX queues are not
// here: a sender holding an unlinked queue open keeps "succeeding" into it,
// which docs/delivery.md states.
func TestSIGTERMUnderLoadLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	shm := "shm://" + filepath.Join(dir, "ring.sock") + "?size=64KiB" // small: the ring is full when the signal comes
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--listen", shm)
	type prod struct {
		cmd    *exec.Cmd
		stderr bytes.Buffer
	}
	var ps []*prod
	targets := []struct{ transport, url string }{
		{"unixsock", "unix://" + sock}, {"unixsock", "unix://" + sock}, {"unixsock", "unix://" + sock},
		{"shm", p.url("shm")},
	}
	for i, tg := range targets {
		pr := &prod{}
		pr.cmd = exec.Command(testenv.Binary(t, "producer"), tg.transport, "150", "--addr", tg.url,
			"--rate", "0", "--duration", "60s", "--seq", "--id", "term-"+strconv.Itoa(i), "--reconnect=false", "--json-summary")
		pr.cmd.Stderr = &pr.stderr
		if err := pr.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, pr)
	}
	p.waitMetric(20000, "logagg_records_out_total")
	p.stop(syscall.SIGTERM)
	sent := map[string]int64{}
	for i, pr := range ps {
		pr.cmd.Wait() // non-zero: its aggregator went away
		var s struct{ Sent int64 }
		if err := jsonLastLine(pr.stderr.Bytes(), &s); err != nil {
			t.Fatalf("producer %d summary: %v\n%s", i, err, pr.stderr.String())
		}
		sent["term-"+strconv.Itoa(i)] = s.Sent
	}
	got := map[string]map[uint64]bool{}
	for _, line := range bytes.Split(mustRead(t, p.output), []byte("\n")) {
		if st, ok := seqstamp.Find(line); ok {
			if got[st.Producer] == nil {
				got[st.Producer] = map[uint64]bool{}
			}
			got[st.Producer][st.Seq] = true
		}
	}
	for id, n := range sent {
		if n == 0 {
			t.Fatalf("%s sent nothing", id)
		}
		for seq := uint64(1); seq <= uint64(n); seq++ {
			if !got[id][seq] {
				t.Fatalf("%s: seq %d of %d (write succeeded) missing after SIGTERM", id, seq, n)
			}
		}
		t.Logf("%s: all %d records the producer sent are in the file", id, n)
	}
}

// SIGKILL of the aggregator while producers run, then a restart on the same
// addresses: stream producers reconnect and carry on to the end.
func TestSIGKILLThenRestartProducersReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	fifo := filepath.Join(dir, "f.fifo")
	args := []string{"--listen", "unix://" + sock, "--listen", "fifo://" + fifo}
	p1 := startAgg(t, dir, args...)
	const count = 3000
	var prods []*exec.Cmd
	var outs []*bytes.Buffer
	for i, addr := range []string{"unix://" + sock, "fifo://" + fifo} {
		var b bytes.Buffer
		c := exec.Command(testenv.Binary(t, "producer"), "unixsock", "120", "--addr", addr, "--rate", "1000",
			"--count", strconv.Itoa(count), "--seq", "--id", "kill-"+strconv.Itoa(i), "--json-summary")
		c.Stderr = &b
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		prods = append(prods, c)
		outs = append(outs, &b)
	}
	p1.waitMetric(500, "logagg_records_out_total")
	// Kill returns once the process is gone, its connections and FIFO
	// reader closed.
	p1.proc.Kill()
	p2 := startAgg(t, dir, args...) // stale socket and FIFO are replaced
	for i, c := range prods {
		if err := c.Wait(); err != nil {
			t.Fatalf("producer %d did not deliver after the restart: %v\n%s", i, err, outs[i].String())
		}
		// Each producer's connection died with the aggregator, however soon
		// the new one came up: it had to reconnect.
		var sum struct{ Reconnects int }
		if err := jsonLastLine(outs[i].Bytes(), &sum); err != nil || sum.Reconnects == 0 {
			t.Errorf("producer %d: summary %v, reconnects %d; want at least one\n%s", i, err, sum.Reconnects, outs[i].String())
		}
	}
	p2.stop(syscall.SIGTERM)
	last := map[string]bool{}
	for _, line := range bytes.Split(mustRead(t, p2.output), []byte("\n")) {
		if st, ok := seqstamp.Find(line); ok && st.Seq == count {
			last[st.Producer] = true
		}
	}
	for i := range prods {
		if !last["kill-"+strconv.Itoa(i)] {
			t.Errorf("producer kill-%d: its last record never arrived after the restart", i)
		}
	}
}

func TestRegularFileAtSocketPathIsAnErrorAndKept(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	path := filepath.Join(dir, "precious.txt")
	os.WriteFile(path, []byte("do not delete"), 0o644)
	out, err := exec.Command(testenv.Binary(t, "aggregator"), "--output", filepath.Join(dir, "o.jsonl"),
		"--listen", "unix://"+path).CombinedOutput()
	if err == nil {
		t.Fatalf("aggregator accepted a regular file as socket path:\n%s", out)
	}
	if !strings.Contains(string(out), "not a socket") {
		t.Errorf("error does not say what is wrong:\n%s", out)
	}
	if b, _ := os.ReadFile(path); string(b) != "do not delete" {
		t.Fatal("regular file was modified or deleted")
	}
}

func TestBadArgumentsAreClearErrors(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	bin := testenv.Binary(t, "aggregator")
	cfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(cfg, []byte("listen: [unix:///tmp/x.sock]\noutput: {fsync: sometimes}\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "gopher://x"}, "unknown transport scheme"},
		{[]string{"--listen", "tcp://nohost:notaport"}, "listen[0]"},
		{[]string{"--listen", "tcp://256.1.1.1:9000"}, "bad listen address"},
		{[]string{"carrierpigeon"}, "unknown transport"},
		{[]string{"--config", cfg}, "output.fsync"},
		{[]string{"--listen", "unix:///tmp/x.sock", "--max-record", "1"}, "limits.max_record"},
	} {
		out, err := exec.Command(bin, append([]string{"--output", filepath.Join(dir, "o.jsonl")}, c.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: err=%v, output %q does not contain %q", c.args, err, out, c.want)
		}
	}
}

func TestSIGHUPReopensOutput(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock)
	send := func(msg string) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(c, msg)
		c.Close()
	}
	send("before-rotate")
	p.waitMetric(1, "logagg_records_out_total")
	os.Rename(p.output, p.output+".old")
	p.signal(syscall.SIGHUP)
	p.waitMetric(1, "logagg_reopens_total")
	send("after-rotate")
	p.waitMetric(2, "logagg_records_out_total")
	p.stop(syscall.SIGTERM)
	if !bytes.Contains(mustRead(t, p.output+".old"), []byte("before-rotate")) ||
		!bytes.Contains(mustRead(t, p.output), []byte("after-rotate")) {
		t.Fatal("SIGHUP did not reopen the output file")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonLastLine(b []byte, v any) error {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); len(l) > 0 && l[0] == '{' {
			return jsonUnmarshal(l, v)
		}
	}
	return fmt.Errorf("no JSON line")
}

// Peer identity beyond unix sockets: for a loopback TCP connection, a UDP
// sender and a FIFO writer the aggregator finds the producing process
// (agg.peer.via "lookup"); the pid must be the real producer's (a UDP
// record may have none, never another's).
func TestPeerIdentityByLookup(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	fifo := filepath.Join(dir, "f.fifo")
	p := startAgg(t, dir, "--listen", "tcp://127.0.0.1:0", "--listen", "udp://127.0.0.1:0", "--listen", "fifo://"+fifo)
	pids := map[string]int{}
	for _, tr := range []struct{ name, url string }{
		{"tcp", p.url("tcp")}, {"udp", p.url("udp")}, {"fifo", "fifo://" + fifo},
	} {
		c := exec.Command(testenv.Binary(t, "producer"), tr.name, "120", "--addr", tr.url, "--rate", "100",
			"--count", "30", "--seq", "--id", "peer-"+tr.name)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		pids["peer-"+tr.name] = c.Process.Pid
		if err := c.Wait(); err != nil {
			t.Fatalf("%s producer: %v\n%s", tr.name, err, stderr.String())
		}
	}
	p.waitMetric(90, "logagg_records_out_total")
	p.stop(syscall.SIGTERM)
	seen := map[string]bool{}
	for _, r := range readRecords(t, p.output) {
		id, _ := r["producer_id"].(string)
		want, ok := pids[id]
		if !ok {
			continue
		}
		peer, _ := agg(r)["peer"].(map[string]any)
		pid, hasPID := peer["pid"].(float64)
		if id == "peer-udp" && !hasPID {
			// A datagram read after its sender closed names nobody: the
			// port could have changed hands (peerid.UDPCache).
			continue
		}
		if int(pid) != want || peer["via"] != "lookup" {
			t.Fatalf("%s: peer %v, want pid %d via lookup", id, peer, want)
		}
		seen[id] = true
	}
	for id := range pids {
		if !seen[id] {
			t.Errorf("%s: no record carried the producer's pid", id)
		}
	}
}
