// Package peers runs rsyslog and syslog-ng side by side with our aggregator,
// as harness.Daemon implementations, so `ipcbench peers` drives all three
// with the same producer and accounts for every record the same way.
//
// Each daemon runs in the foreground with its own configuration, pid file,
// sockets and ports in a private directory, writing JSON lines to a private
// file. Nothing touches /dev/log or a system service.
//
// rsyslog and syslog-ng conflict as Debian packages: rsyslog is installed,
// syslog-ng-core is unpacked into a private prefix by scripts/setup.sh
// (SyslogNGPrefix). Both get flow control on their stream inputs so that,
// like ours, they hold producers back instead of dropping: the comparison is
// of loss-free configurations.
package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
)

// SyslogNGPrefix is where scripts/setup.sh unpacks syslog-ng-core.
func SyslogNGPrefix() string {
	if p := os.Getenv("LOGAGG_SYSLOG_NG"); p != "" {
		return p
	}
	cache := os.Getenv("LOGAGG_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "logagg")
	}
	return filepath.Join(cache, "syslog-ng")
}

// ErrUnavailable is returned by Start when the daemon is not installed.
var ErrUnavailable = errors.New("peer daemon not installed (run scripts/setup.sh)")

// endpoints are the private addresses of one peer run.
type endpoints struct {
	Dir, Stream, Dgram, Output string
	TCPPort, UDPPort           int
}

func newEndpoints(dir string) (endpoints, error) {
	tp, err := freePort("tcp")
	if err != nil {
		return endpoints{}, err
	}
	up, err := freePort("udp")
	if err != nil {
		return endpoints{}, err
	}
	return endpoints{
		Dir:     dir,
		Stream:  filepath.Join(dir, "log.sock"),
		Dgram:   filepath.Join(dir, "log.dgram.sock"),
		Output:  filepath.Join(dir, "out.jsonl"),
		TCPPort: tp,
		UDPPort: up,
	}, nil
}

func freePort(network string) (int, error) {
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (e endpoints) url(transport string) string {
	switch transport {
	case "unixsock", "unix":
		return "unix://" + e.Stream
	case "unixgram":
		return "unixgram://" + e.Dgram
	case "tcp":
		return "tcp://127.0.0.1:" + strconv.Itoa(e.TCPPort)
	case "udp":
		return "udp://127.0.0.1:" + strconv.Itoa(e.UDPPort)
	}
	return ""
}

// Supported reports whether a peer takes input over transport.
func Supported(transport string) bool {
	switch transport {
	case "unixsock", "unix", "unixgram", "tcp", "udp":
		return true
	}
	return false
}

// running is a started peer daemon.
type running struct {
	e       endpoints
	cmd     *exec.Cmd
	config  string
	stderr  *bytes.Buffer
	waitErr chan error
}

func (r *running) URL(t string) string             { return r.e.url(t) }
func (r *running) Output() string                  { return r.e.Output }
func (r *running) Config() string                  { return r.config }
func (r *running) Pid() int                        { return r.cmd.Process.Pid }
func (r *running) KernelDrops() map[string]int64   { return nil }
func (r *running) Stop() (*os.ProcessState, error) { return stopProcess(r.cmd, r.waitErr, r.stderr) }

func stopProcess(cmd *exec.Cmd, waitErr chan error, stderr *bytes.Buffer) (*os.ProcessState, error) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-waitErr:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-waitErr
		return cmd.ProcessState, fmt.Errorf("%s did not exit on SIGTERM\n%s", filepath.Base(cmd.Path), stderr.String())
	}
	return cmd.ProcessState, nil
}

// startAndWait starts cmd and waits until every unix socket exists and the
// TCP port accepts, or the process dies.
func startAndWait(cmd *exec.Cmd, e endpoints, transports []string, stderr io.Writer) (chan error, *bytes.Buffer, error) {
	var buf bytes.Buffer
	if stderr != nil {
		cmd.Stdout = io.MultiWriter(&buf, stderr)
		cmd.Stderr = io.MultiWriter(&buf, stderr)
	} else {
		cmd.Stdout = &buf
		cmd.Stderr = &buf
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ready := true
		for _, t := range transports {
			switch t {
			case "unixsock", "unix":
				ready = ready && exists(e.Stream)
			case "unixgram":
				ready = ready && exists(e.Dgram)
			case "tcp":
				c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", e.TCPPort), 100*time.Millisecond)
				if err == nil {
					c.Close()
				}
				ready = ready && err == nil
			}
		}
		if ready {
			// UDP has no handshake: give the input a moment to bind.
			time.Sleep(300 * time.Millisecond)
			return waitErr, &buf, nil
		}
		select {
		case err := <-waitErr:
			return nil, nil, fmt.Errorf("%s exited at start-up: %w\n%s", filepath.Base(cmd.Path), err, buf.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return nil, nil, fmt.Errorf("%s did not open its inputs within 15s\n%s", filepath.Base(cmd.Path), buf.String())
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func render(tmpl string, e endpoints, transports []string) (string, error) {
	t, err := template.New("conf").Parse(tmpl)
	if err != nil {
		return "", err
	}
	has := map[string]bool{}
	for _, tr := range transports {
		if tr == "unix" {
			tr = "unixsock"
		}
		has[tr] = true
	}
	var b strings.Builder
	err = t.Execute(&b, struct {
		endpoints
		Has map[string]bool
	}{e, has})
	return b.String(), err
}

// Rsyslog is rsyslogd from Debian's package.
type Rsyslog struct{ Bin string }

func (Rsyslog) Name() string { return "rsyslog" }

// Supports reports whether rsyslog takes input over transport (throughput's
// --vs rsyslog asks).
func (Rsyslog) Supports(transport string) bool { return Supported(transport) }

// rsyslogConf: imptcp for the unix stream socket and TCP (its fast TCP
// input), imuxsock for the datagram socket, imudp for UDP, one omfile with a
// JSON template comparable to our record. Stream inputs block producers
// when the main queue is full (rsyslog's default for these inputs).
const rsyslogConf = `global(workDirectory="{{.Dir}}" maxMessageSize="64k")
module(load="imuxsock" SysSock.Use="off")
module(load="imptcp")
module(load="imudp")
template(name="json" type="string"
  string="{\"timestamp\":\"%timereported:::date-rfc3339%\",\"host\":\"%hostname%\",\"source\":\"%programname%\",\"level\":\"%syslogseverity-text%\",\"message\":\"%msg:::json%\"}\n")
{{if .Has.unixsock}}input(type="imptcp" path="{{.Stream}}" unlink="on")
{{end}}{{if .Has.unixgram}}input(type="imuxsock" Socket="{{.Dgram}}" CreatePath="on")
{{end}}{{if .Has.tcp}}input(type="imptcp" port="{{.TCPPort}}" address="127.0.0.1")
{{end}}{{if .Has.udp}}input(type="imudp" port="{{.UDPPort}}" address="127.0.0.1")
{{end}}action(type="omfile" file="{{.Output}}" template="json")
`

func (r Rsyslog) Start(ctx context.Context, dir string, transports []string, stderr io.Writer) (harness.Running, error) {
	bin := r.Bin
	if bin == "" {
		bin = "/usr/sbin/rsyslogd"
	}
	if !exists(bin) {
		return nil, fmt.Errorf("rsyslog: %w", ErrUnavailable)
	}
	e, err := newEndpoints(dir)
	if err != nil {
		return nil, err
	}
	conf, err := render(rsyslogConf, e, transports)
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "rsyslog.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-n", "-f", confPath, "-i", filepath.Join(dir, "rsyslog.pid"))
	waitErr, buf, err := startAndWait(cmd, e, transports, stderr)
	if err != nil {
		return nil, err
	}
	return &running{e: e, cmd: cmd, config: conf, stderr: buf, waitErr: waitErr}, nil
}

// SyslogNG is syslog-ng-core unpacked into a private prefix.
type SyslogNG struct{ Prefix string }

func (SyslogNG) Name() string { return "syslog-ng" }

// syslogngConf: flags(flow-control) on the log path makes stream sources
// stop reading instead of dropping when the destination is behind, as ours
// and rsyslog's do. log_fifo_size is raised from its small default so the
// window sizing warning does not apply.
const syslogngConf = `@version: 3.38
options { keep_hostname(yes); chain_hostnames(no); stats_freq(0); log_fifo_size(100000); };
source s_in {
{{if .Has.unixsock}}  unix-stream("{{.Stream}}" max-connections(256));
{{end}}{{if .Has.unixgram}}  unix-dgram("{{.Dgram}}");
{{end}}{{if .Has.tcp}}  network(ip("127.0.0.1") port({{.TCPPort}}) transport("tcp") max-connections(256));
{{end}}{{if .Has.udp}}  network(ip("127.0.0.1") port({{.UDPPort}}) transport("udp"));
{{end}}};
destination d_file { file("{{.Output}}" template("$(format-json timestamp=${ISODATE} host=${HOST} source=${PROGRAM} level=${LEVEL} message=${MSG})\n")); };
log { source(s_in); destination(d_file); flags(flow-control); };
`

func (s SyslogNG) Start(ctx context.Context, dir string, transports []string, stderr io.Writer) (harness.Running, error) {
	prefix := s.Prefix
	if prefix == "" {
		prefix = SyslogNGPrefix()
	}
	bin := filepath.Join(prefix, "usr/sbin/syslog-ng")
	if !exists(bin) {
		return nil, fmt.Errorf("syslog-ng (%s): %w", bin, ErrUnavailable)
	}
	e, err := newEndpoints(dir)
	if err != nil {
		return nil, err
	}
	conf, err := render(syslogngConf, e, transports)
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "syslog-ng.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	libdir := filepath.Join(prefix, "usr/lib/syslog-ng")
	cmd := exec.CommandContext(ctx, bin, "-F", "-f", confPath,
		"--module-path="+filepath.Join(libdir, "3.38"),
		"--persist-file="+filepath.Join(dir, "syslog-ng.persist"),
		"--pidfile="+filepath.Join(dir, "syslog-ng.pid"),
		"--control="+filepath.Join(dir, "syslog-ng.ctl"))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libdir)
	waitErr, buf, err := startAndWait(cmd, e, transports, stderr)
	if err != nil {
		return nil, err
	}
	return &running{e: e, cmd: cmd, config: conf, stderr: buf, waitErr: waitErr}, nil
}
