package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Producer is how to start our producer (cmd/producer) for one run of an
// experiment. It is data: nothing happens until Start. Every record is
// stamped with ID and a sequence number (--seq), so the output can be
// counted per producer, and the producer ends with one JSON summary line.
type Producer struct {
	Bin       string // the producer binary (required)
	Transport string // unixsock, tcp, … (required)
	URL       string // where to send (--addr; required)
	Size      int    // record size in bytes (required)
	ID        string // producer id in every record (--id; required)
	// Rate is records per second; 0 sends flat out. Always passed: the
	// producer's own default is a trickle of 10/s.
	Rate     int
	Count    int           // stop after Count records (0: no limit)
	Duration time.Duration // stop after this long (0: the producer's default unless Count is set)
	Buffer   int           // user-space write buffer (0: one write per record)
	Format   string        // record format ("": the producer's default, JSON)
	// Ack asks for acknowledged delivery where the transport has it
	// (Acknowledged); it is ignored on the others.
	Ack bool
	// CPUs, if set, pins the producer with taskset before it execs, so
	// every thread it starts inherits the mask ("1", "0-1").
	CPUs string
	// Gated holds the producer at a gate: a shell that execs it (keeping
	// its pid) only at Release. A tracer can then attach to the pid before
	// the producer's first system call (its execve).
	Gated bool
}

// ProducerSummary is the producer's JSON summary line (cmd/producer
// --json-summary), the part the lab uses.
type ProducerSummary struct {
	Sent   int64  `json:"sent"`
	Failed int64  `json:"failed"`
	Writes int64  `json:"writes"`
	Error  string `json:"error"`
}

// ProducerProc is a started producer.
type ProducerProc struct {
	id     string
	cmd    *exec.Cmd
	gate   io.WriteCloser // nil unless Gated
	stderr bytes.Buffer
	done   chan struct{}
	err    error // cmd.Wait's, valid after done
}

// Acknowledged reports whether the aggregator acknowledges records on the
// lab's transport (client.WithAck: unix stream and TCP sockets).
func Acknowledged(transport string) bool { return transport == "unixsock" || transport == "tcp" }

// gateScript reads one line, then replaces the shell with "$0" "$@" (the
// producer and its arguments). EOF instead of the line exits without
// running it.
const gateScript = `read x && exec "$0" "$@"`

// Args are the producer's command-line arguments.
func (p Producer) Args() []string {
	args := []string{p.Transport, strconv.Itoa(p.Size), "--addr", p.URL, "--seq", "--id", p.ID,
		"--rate", strconv.Itoa(p.Rate), "--json-summary"}
	if p.Count > 0 {
		args = append(args, "--count", strconv.Itoa(p.Count))
	}
	if p.Duration > 0 {
		args = append(args, "--duration", p.Duration.String())
	}
	if p.Buffer > 0 {
		args = append(args, "--buffer", strconv.Itoa(p.Buffer))
	}
	if p.Format != "" {
		args = append(args, "--format", p.Format)
	}
	if p.Ack && Acknowledged(p.Transport) {
		args = append(args, "--ack")
	}
	return args
}

// Start starts the producer; unless Gated, it runs at once. ctx bounds
// its life (its end kills it).
func (p Producer) Start(ctx context.Context) (*ProducerProc, error) {
	switch {
	case p.Bin == "":
		return nil, errors.New("harness: no producer binary")
	case p.Transport == "" || p.URL == "" || p.ID == "" || p.Size <= 0:
		return nil, fmt.Errorf("harness: producer %q needs a transport, URL, id and size", p.ID)
	}
	argv := append([]string{p.Bin}, p.Args()...)
	if p.CPUs != "" {
		argv = append([]string{"taskset", "-c", p.CPUs}, argv...)
	}
	if p.Gated {
		argv = append([]string{"/bin/sh", "-c", gateScript}, argv...)
	}
	pp := &ProducerProc{id: p.ID, done: make(chan struct{})}
	pp.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	// A producer outliving a killed ipcbench would keep sending.
	pp.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pp.cmd.Stderr = &pp.stderr
	if p.Gated {
		var err error
		if pp.gate, err = pp.cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if err := pp.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start producer %s: %w", p.ID, err)
	}
	go func() {
		pp.err = pp.cmd.Wait()
		close(pp.done)
	}()
	return pp, nil
}

// Pid is the producer's pid (with a gate, the shell's, which the producer
// keeps when the gate opens).
func (pp *ProducerProc) Pid() int { return pp.cmd.Process.Pid }

// Release opens the gate of a Gated producer; for others it does nothing.
func (pp *ProducerProc) Release() error {
	if pp.gate == nil {
		return nil
	}
	_, err := io.WriteString(pp.gate, "go\n")
	pp.gate.Close()
	return err
}

// Kill kills the producer (a gated one never runs) and waits for it. It
// is a no-op on a producer that has exited.
func (pp *ProducerProc) Kill() {
	_ = pp.cmd.Process.Kill()
	if pp.gate != nil {
		pp.gate.Close()
	}
	<-pp.done
}

// Wait waits for the producer to exit and returns its summary line. A
// producer that could not deliver everything exits non-zero and says why
// in the summary's Error, with true counts of what it sent; that is a
// result, not an error here. The error is for a producer that wrote no
// summary (it crashed, or never ran), quoting its stderr.
func (pp *ProducerProc) Wait() (ProducerSummary, error) {
	<-pp.done
	s, ok := parseProducerSummary(pp.stderr.Bytes())
	if !ok {
		exit := pp.err
		if exit == nil {
			exit = errors.New("exit status 0")
		}
		return s, fmt.Errorf("producer %s: no JSON summary (%w): %s", pp.id, exit, strings.TrimSpace(pp.stderr.String()))
	}
	return s, nil
}

// CPU is the user and system time the producer used; valid after Wait.
func (pp *ProducerProc) CPU() time.Duration {
	if st := pp.cmd.ProcessState; st != nil {
		return st.UserTime() + st.SystemTime()
	}
	return 0
}

// parseProducerSummary finds the last JSON summary line in stderr.
func parseProducerSummary(stderr []byte) (ProducerSummary, bool) {
	lines := bytes.Split(bytes.TrimSpace(stderr), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		var s ProducerSummary
		if len(l) > 0 && l[0] == '{' && json.Unmarshal(l, &s) == nil {
			return s, true
		}
	}
	return ProducerSummary{}, false
}
