package main

// The aggregator as systemd runs it, with systemd's own tools where a
// service manager is needed: systemd-socket-activate(1) passes the
// sockets, and a unix datagram socket of the test stands in for
// $NOTIFY_SOCKET.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/testenv"
)

// notifySocket is a fake $NOTIFY_SOCKET: it keeps every datagram received.
type notifySocket struct {
	path string
	conn *net.UnixConn
	mu   sync.Mutex
	msgs []string
	done chan struct{}
}

func newNotifySocket(t *testing.T, dir string) *notifySocket {
	t.Helper()
	n := &notifySocket{path: filepath.Join(dir, "notify.sock"), done: make(chan struct{})}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n.conn = c
	go func() {
		defer close(n.done)
		buf := make([]byte, 4096)
		for {
			k, _, err := c.ReadFromUnix(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, strings.Split(string(buf[:k]), "\n")...)
			n.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); <-n.done })
	return n
}

// lines are the assignments received so far, in order.
func (n *notifySocket) lines() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

// index is the position of the first line with prefix at or after from, or -1.
func index(lines []string, from int, prefix string) int {
	for i := max(from, 0); i < len(lines); i++ {
		if strings.HasPrefix(lines[i], prefix) {
			return i
		}
	}
	return -1
}

// waitFor polls until cond holds, failing after timeout with what msg says.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	if _, ok := testenv.Until(timeout, func() (struct{}, bool) { return struct{}{}, cond() }); !ok {
		t.Fatalf("timed out: %s", msg())
	}
}

// freeLoopbackPort returns a port free on 127.0.0.1 for both TCP and UDP
// at the time of asking.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// startWithConfig runs the aggregator with --config path until it writes,
// its stderr collected; exited receives its exit.
func startWithConfig(t *testing.T, path string) (*exec.Cmd, *syncBuffer, chan error) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t, "aggregator"), "--config", path)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(stderr.String(), "aggregator: writing") }, stderr.String)
	return cmd, stderr, exited
}

// TestSocketActivation hands the aggregator a unix datagram socket and a
// UDP port (one systemd-socket-activate --datagram), and a unix stream
// socket and a TCP port (a second one, nested: it passes the first one's
// descriptors on with its own), the stream socket by name and the rest by
// address; logger and our producer send through them. The notification
// socket sees READY=1, STATUS=, WATCHDOG=1 and at SIGTERM STOPPING=1; the
// sockets stay (systemd owns them).
func TestSocketActivation(t *testing.T) {
	sa := testenv.RequireCommand(t, "systemd-socket-activate")
	loggerBin := testenv.RequireCommand(t, "logger")
	aggBin, producerBin := testenv.Binary(t, "aggregator"), testenv.Binary(t, "producer")
	dir := testenv.ShortTempDir(t)
	ntf := newNotifySocket(t, dir)
	dgramPath, streamPath := filepath.Join(dir, "log"), filepath.Join(dir, "app.sock")
	out := filepath.Join(dir, "out.jsonl")
	port := strconv.Itoa(freeLoopbackPort(t))

	cmd := exec.Command(sa, "--datagram", "-l", dgramPath, "-l", "127.0.0.1:"+port,
		sa, "-l", streamPath, "-l", "127.0.0.1:"+port,
		"--fdname=unknown:unknown:app:unknown",
		"-E", "NOTIFY_SOCKET="+ntf.path, "-E", "WATCHDOG_USEC=200000",
		aggBin, "--output", out, "--fsync", "never",
		"--listen", "unixgram://"+dgramPath,
		"--listen", "udp://127.0.0.1:"+port,
		"--listen", "unix:///nonexistent/by-name.sock?fdname=app",
		"--listen", "tcp://127.0.0.1:"+port)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	// systemd-socket-activate starts its program at the first datagram or
	// connection; that datagram was queued before any SO_PASSCRED, so the
	// kernel attached no sender.
	exists := func(p string) func() bool {
		return func() bool { _, err := os.Stat(p); return err == nil }
	}
	waitFor(t, 10*time.Second, exists(dgramPath), func() string { return "no datagram socket\n" + stderr.String() })
	run := func(name string, args ...string) int {
		t.Helper()
		c := exec.Command(name, args...)
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s\naggregator:\n%s", name, args, err, b, stderr.String())
		}
		return c.Process.Pid
	}
	run(loggerBin, "-u", dgramPath, "activating")
	// The inner systemd-socket-activate starts the aggregator at once: the
	// datagram waits on a descriptor it passes on.
	waitFor(t, 15*time.Second, func() bool { return index(ntf.lines(), 0, "READY=1") >= 0 },
		func() string { return fmt.Sprintf("no READY=1 (got %q)\n%s", ntf.lines(), stderr.String()) })

	pids := map[string]int{
		"unixgram": run(loggerBin, "-u", dgramPath, "over unixgram"),
		"unix":     run(producerBin, "unixsock", "100", "--addr", "unix://"+streamPath, "--count", "3", "--rate", "0", "--seq", "--id", "sa-unix"),
		// (paced, so it is still connected when its pid is looked up)
		"tcp": run(producerBin, "tcp", "100", "--addr", "tcp://127.0.0.1:"+port, "--count", "3", "--rate", "50", "--seq", "--id", "sa-tcp"),
		"udp": run(loggerBin, "-d", "-n", "127.0.0.1", "-P", port, "over udp"),
	}
	want := 1 + 1 + 3 + 3 + 1
	waitFor(t, 15*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		return bytes.Count(b, []byte("\n")) >= want
	}, func() string {
		b, _ := os.ReadFile(out)
		return fmt.Sprintf("want %d records, have\n%s\n%s", want, b, stderr.String())
	})
	waitFor(t, 10*time.Second, func() bool {
		l := ntf.lines()
		return index(l, 0, "WATCHDOG=1") >= 0 && index(l, 0, "STATUS=") >= 0
	}, func() string { return fmt.Sprintf("no WATCHDOG=1 and STATUS= (got %q)", ntf.lines()) })

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", stderr.String())
	}
	lines := ntf.lines()
	ready := index(lines, 0, "READY=1")
	if stop := index(lines, ready, "STOPPING=1"); stop < 0 {
		t.Errorf("no STOPPING=1 after READY=1: %q", lines)
	}
	if i := index(lines, 0, "STATUS="); !strings.Contains(lines[i], "records/s") || !strings.Contains(lines[i], "queue") {
		t.Errorf("STATUS line %q lacks records/s and queue depth", lines[i])
	}
	for _, p := range []string{dgramPath, streamPath} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("inherited socket %s removed at exit: %v", p, err)
		}
		if _, err := os.Stat(p + ".lock"); err == nil {
			t.Errorf("lock file %s.lock left behind", p)
		}
	}

	byTransport := map[string]int{}
	for _, r := range readRecords(t, out) {
		a := agg(r)
		tr, _ := a["transport"].(string)
		byTransport[tr]++
		peer, _ := a["peer"].(map[string]any)
		pid, hasPID := peer["pid"].(float64)
		if r["message"] == "activating" {
			if hasPID {
				t.Errorf("the datagram queued before SO_PASSCRED names pid %v (the kernel attached no sender)", peer)
			}
			continue
		}
		wantURL := map[string]string{"unixgram": "unixgram://" + dgramPath, "unix": "unix://" + streamPath,
			"tcp": "tcp://127.0.0.1:" + port, "udp": "udp://127.0.0.1:" + port}[tr]
		if a["listener"] != wantURL {
			t.Errorf("%s record's listener %v, want %s", tr, a["listener"], wantURL)
		}
		if tr == "udp" {
			continue // logger closed its socket: a UDP sender is then unconfirmed (peerid.UDPCache)
		}
		if !hasPID || int(pid) != pids[tr] || int(peer["uid"].(float64)) != os.Getuid() {
			t.Errorf("%s record's peer %v, want pid %d uid %d", tr, peer, pids[tr], os.Getuid())
		}
	}
	for tr, n := range map[string]int{"unixgram": 2, "unix": 3, "tcp": 3, "udp": 1} {
		if byTransport[tr] != n {
			t.Errorf("%d %s records, want %d (all: %v)", byTransport[tr], tr, n, byTransport)
		}
	}
}

// TestSocketActivationUnusedSocket: a passed socket that no listener
// serves stops the start with a message naming it and the URL to add.
func TestSocketActivationUnusedSocket(t *testing.T) {
	sa := testenv.RequireCommand(t, "systemd-socket-activate")
	dir := testenv.ShortTempDir(t)
	stray := filepath.Join(dir, "stray.sock")
	cmd := exec.Command(sa, "-l", stray, testenv.Binary(t, "aggregator"),
		"--output", filepath.Join(dir, "out.jsonl"), "--listen", "unix://"+filepath.Join(dir, "mine.sock"))
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitFor(t, 10*time.Second, func() bool {
		c, err := net.Dial("unix", stray) // the connection starts it
		if err == nil {
			c.Close()
		}
		return err == nil
	}, func() string { return "cannot connect to " + stray })
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if err == nil || !asExit(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want status 1\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("aggregator kept running with an unused socket\n%s", stderr.String())
	}
	if s := stderr.String(); !strings.Contains(s, "matches no listener") || !strings.Contains(s, "unix://"+stray) {
		t.Fatalf("message does not name the socket and its URL:\n%s", s)
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	var e *exec.ExitError
	ok := errors.As(err, &e)
	*ee = e
	return ok
}

// TestCheckConfig runs `aggregator check-config` as ExecReload= does:
// exit 0 for a valid file, 1 naming the field for an invalid one, 2 for
// a usage error.
func TestCheckConfig(t *testing.T) {
	bin := testenv.Binary(t, "aggregator")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"valid.yaml", "listen: [\"unixgram:///dev/log?fdname=devlog\", \"udp://127.0.0.1:5514\"]\noutput: {path: /var/log/logagg/all.jsonl, fsync: interval=1s}\n", 0, "is valid"},
		{"fsync.yaml", "listen: [\"unix:///run/logagg/log.sock\"]\noutput: {fsync: sometimes}\n", 1, "output.fsync:"},
		{"scheme.yaml", "listen: [\"carrier-pigeon://loft\"]\n", 1, "listen[0]:"},
		{"file-param.yaml", "listen: [\"file:///var/log/*.log?from=middle\"]\n", 1, "listen[0]:"},
		{"journal-param.yaml", "listen: [\"unix:///x.sock\", \"journal://?from=start&unit=\"]\n", 1, "listen[1]:"},
		{"inputs.yaml", "listen: [\"file:///var/log/*.log?from=start&multiline=java\", \"journal://?unit=ssh.service\"]\n", 0, "is valid"},
		{"unknown-key.yaml", "listen: [\"unix:///x.sock\"]\noutptu: {}\n", 1, "outptu"},
		{"empty.yaml", "", 1, "listen:"},
		{"rule.yaml", "listen: [\"unix:///x.sock\"]\noutputs: {auth: {path: /tmp/auth.jsonl}}\nrules:\n  - {name: ok, route: [auth]}\n  - {name: sshd, match: {selector: \"auth.loud\"}, route: [auth]}\n", 1,
			`rules[1] (sshd).match.selector:`},
		{"route.yaml", "listen: [\"unix:///x.sock\"]\nrules: [{route: [nowhere]}]\n", 1, `rules[0] (rule-1).route: "nowhere" is no output`},
		{"output-key.yaml", "listen: [\"unix:///x.sock\"]\noutputs: {a: {path: /tmp/a, when_full: later}}\n", 1, "outputs.a.when_full:"},
		{"debian.yaml", string(mustRead(t, filepath.Join("..", "..", "contrib", "examples", "debian-rsyslog.yaml"))), 0, "is valid"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, "check-config", write(c.name, c.body))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(stdout.String()+stderr.String(), c.want) {
			t.Errorf("check-config %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", c.name, code, c.code, c.want, stdout.String(), stderr.String())
		}
	}
	if err, ee := exec.Command(bin, "check-config").Run(), (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("check-config without a file: %v, want exit status 2", err)
	}
}

// TestUnitFilesVerify runs systemd-analyze verify over the shipped units in
// a scratch root holding the system's own units, a stand-in for
// /usr/bin/aggregator and /bin/kill (verify checks that ExecStart= and
// ExecReload= name executables): clean means no output at all, since
// verify reports unknown keys and bad values as warnings with status 0.
// The shipped default configuration must pass check-config.
func TestUnitFilesVerify(t *testing.T) {
	analyze := testenv.RequireCommand(t, "systemd-analyze")
	const systemUnits = "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(systemUnits, "sysinit.target")); err != nil {
		testenv.SkipOrFail(t, "no systemd units in "+systemUnits+" (install the systemd package)")
	}
	repo := testenv.RepoRoot(t)
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "bin", "etc/systemd/system", "usr/lib/systemd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := exec.Command("cp", "-a", systemUnits, filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copy system units: %v\n%s", err, b)
	}
	for _, exe := range []string{"usr/bin/aggregator", "bin/kill"} {
		if err := os.WriteFile(filepath.Join(root, exe), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	units, _ := filepath.Glob(filepath.Join(repo, "contrib/systemd/*"))
	if len(units) < 3 {
		t.Fatalf("units in contrib/systemd: %v", units)
	}
	args := []string{"verify", "--root=" + root}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, "etc/systemd/system", filepath.Base(u))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, dst)
	}
	out, err := exec.Command(analyze, args...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze %v: %v\n%s", args, err, out)
	}

	// The group logagg exists once the package is installed (the deb
	// test checks the file there); here the test's own group stands in.
	cfg, err := os.ReadFile(filepath.Join(repo, "contrib/logagg.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cfg, []byte("group: logagg\n")) {
		t.Fatal("contrib/logagg.yaml no longer sets sockets.group: logagg; update this test")
	}
	cfg = bytes.Replace(cfg, []byte("group: logagg\n"), []byte("group: \""+strconv.Itoa(os.Getgid())+"\"\n"), 1)
	p := filepath.Join(t.TempDir(), "logagg.yaml")
	if err := os.WriteFile(p, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(testenv.Binary(t, "aggregator"), "check-config", p).CombinedOutput(); err != nil {
		t.Fatalf("shipped contrib/logagg.yaml: %v\n%s", err, b)
	}
}

// TestReload changes the configuration file under a running aggregator and
// sends SIGHUP: a listener kept keeps its open connection, a removed one
// stops, an added one serves, the output moves to its new path; then an
// invalid file is refused and logged, the running configuration kept, and
// the output still reopened (logrotate moved it away).
func TestReload(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	keep, gone := filepath.Join(dir, "keep.sock"), filepath.Join(dir, "gone.sock")
	out1, out2 := filepath.Join(dir, "one.jsonl"), filepath.Join(dir, "two.jsonl")
	port := strconv.Itoa(freeLoopbackPort(t))
	cfgPath := filepath.Join(dir, "logagg.yaml")
	writeCfg := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(fmt.Sprintf("listen: [\"unix://%s\", \"unixgram://%s\"]\noutput: {path: %s, fsync: never}\n", keep, gone, out1))
	cmd, stderr, exited := startWithConfig(t, cfgPath)
	has := func(s string) func() bool { return func() bool { return strings.Contains(stderr.String(), s) } }

	conn, err := net.Dial("unix", keep)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(msg string) {
		t.Helper()
		if _, err := conn.Write([]byte(msg + "\n")); err != nil {
			t.Fatalf("write %q on the kept connection: %v", msg, err)
		}
	}
	contains := func(path, msg string) func() bool {
		return func() bool { b, _ := os.ReadFile(path); return bytes.Contains(b, []byte(msg)) }
	}
	send("before reload")
	waitFor(t, 10*time.Second, contains(out1, "before reload"), stderr.String)

	writeCfg(fmt.Sprintf("listen: [\"unix://%s\", \"tcp://127.0.0.1:%s\"]\noutput: {path: %s, fsync: never, max_files: 3}\n", keep, port, out2))
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, has("listening on tcp://127.0.0.1:"+port), stderr.String)
	waitFor(t, 10*time.Second, func() bool { _, err := os.Stat(gone); return err != nil }, func() string {
		return "removed listener's socket still there\n" + stderr.String()
	})
	send("after reload")
	tc, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("added TCP listener: %v\n%s", err, stderr.String())
	}
	tc.Write([]byte("over added tcp\n"))
	tc.Close()
	waitFor(t, 10*time.Second, func() bool { return contains(out2, "after reload")() && contains(out2, "over added tcp")() }, stderr.String)

	// logrotate moves the output away; the file it reloads with is broken.
	if err := os.Rename(out2, out2+".1"); err != nil {
		t.Fatal(err)
	}
	writeCfg(fmt.Sprintf("listen: [\"unix://%s\"]\noutput: {path: %s, fsync: sometimes}\n", keep, out1))
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, has("reload refused"), stderr.String)
	if !strings.Contains(stderr.String(), "output.fsync") {
		t.Errorf("the refusal does not name output.fsync:\n%s", stderr.String())
	}
	send("after refused reload")
	waitFor(t, 10*time.Second, contains(out2, "after refused reload"), func() string {
		return "the output was not reopened at its running path after a refused reload\n" + stderr.String()
	})
	if c, err := net.Dial("tcp", "127.0.0.1:"+port); err != nil {
		t.Errorf("the refused reload stopped the TCP listener: %v", err)
	} else {
		c.Close()
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", stderr.String())
	}
	if b, _ := os.ReadFile(out1); bytes.Contains(b, []byte("after")) {
		t.Errorf("records after the reload went to the old output:\n%s", b)
	}
}

// TestReloadUnderLoad: three producers send flat out with sequence numbers
// over unix stream, TCP and shm while SIGHUP reloads add and remove other
// listeners, change the rotation size, and add and remove a second output
// with a rule that copies one producer's records there, four times. The
// kept listeners' connections carry on: every record of every producer is
// in the main output exactly once, across the rotated segments, and the
// second output holds only that producer's records, none twice.
func TestReloadUnderLoad(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	out := filepath.Join(dir, "out.jsonl")
	copyOut := filepath.Join(dir, "copy.jsonl")
	port := strconv.Itoa(freeLoopbackPort(t))
	kept := []string{"unix://" + filepath.Join(dir, "u.sock"), "tcp://127.0.0.1:" + port, "shm://" + filepath.Join(dir, "s.sock")}
	extra := []string{"unixgram://" + filepath.Join(dir, "x.sock"), "fifo://" + filepath.Join(dir, "x.fifo")}
	cfgPath := filepath.Join(dir, "logagg.yaml")
	writeCfg := func(i int) {
		t.Helper()
		listen := append(append([]string{}, kept...), extra[i%2])
		quoted := make([]string, len(listen))
		for j, u := range listen {
			quoted[j] = strconv.Quote(u)
		}
		size := []string{"1MiB", "512KiB"}[i%2]
		body := fmt.Sprintf("listen: [%s]\noutput: {path: %s, fsync: never, max_size: %s, max_files: 0}\n", strings.Join(quoted, ", "), out, size)
		if i%2 == 1 {
			body += fmt.Sprintf("outputs: {copy: {path: %s, fsync: never, max_size: 0}}\n", copyOut) +
				"rules: [{name: copy-0, match: {fields: {producer_id: '== \"reload-0\"'}}, route: [default, copy]}]\n"
		}
		if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(0)
	cmd, stderr, exited := startWithConfig(t, cfgPath)

	const count = 150000
	var prods []*producerProc
	for i, u := range kept {
		prods = append(prods, startProducer(t, u, fmt.Sprintf("reload-%d", i), 100, 0, count))
	}
	for i := 1; i <= 4; i++ {
		writeCfg(i)
		before := strings.Count(stderr.String(), "aggregator: listening on "+extra[i%2])
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool {
			return strings.Count(stderr.String(), "aggregator: listening on "+extra[i%2]) > before
		}, func() string { return fmt.Sprintf("reload %d never opened %s\n%s", i, extra[i%2], stderr.String()) })
	}
	running := 0
	for _, p := range prods {
		if !p.finished() {
			running++
		}
	}
	if running == 0 {
		t.Fatal("every producer finished before the last reload: the reloads were not under load")
	}
	if strings.Contains(stderr.String(), "reload refused") {
		t.Fatalf("a reload was refused:\n%s", stderr.String())
	}
	sent := map[string]int64{}
	for _, p := range prods {
		select {
		case <-p.done:
			if p.err != nil {
				t.Logf("aggregator's log:\n%s", stderr.String())
			}
		case <-time.After(60 * time.Second):
		}
		sent[p.id] = p.wait(t, time.Second)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("aggregator exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("aggregator did not exit\n%s", stderr.String())
	}
	local := localStamps(t, out)
	dups, perProducer := 0, map[string]int64{}
	for k, n := range local {
		perProducer[k.producer]++
		dups += n - 1
	}
	for id, n := range sent {
		if n != count || perProducer[id] != n {
			t.Errorf("producer %s: sent %d of %d, %d distinct on disk", id, n, count, perProducer[id])
		}
	}
	if dups != 0 {
		t.Errorf("%d duplicate records across the reloads", dups)
	}
	checkContiguous(t, local, sent)
	rotated, _ := segment.ListRotated(out)
	if len(rotated) < 2 {
		t.Errorf("%d rotated segments: the reloaded rotation size never applied", len(rotated))
	}
	copies := localStamps(t, copyOut)
	for k, n := range copies {
		if k.producer != "reload-0" || n != 1 {
			t.Errorf("the second output holds %s seq %d %d times", k.producer, k.seq, n)
			break
		}
	}
	if len(copies) == 0 {
		t.Error("the second output, added by reloads, got no record")
	}
	t.Logf("the second output holds %d of reload-0's records", len(copies))
}
