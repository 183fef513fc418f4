package rtt

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/ipclab/logagg/internal/bench"
)

// EchoSubcommand is the hidden subcommand name a binary must route to
// EchoMain (ipcbench's main does; tests do it in TestMain).
const EchoSubcommand = "_echo"

// childReport is what the echo side writes on the control pipe (fd 3), one
// JSON line when ready and one when done (or one with Error).
type childReport struct {
	Phase     string `json:"phase"` // "ready" or "done"
	PID       int    `json:"pid"`
	CPU       int    `json:"cpu"`
	Affinity  []int  `json:"affinity,omitempty"`
	SchedFIFO string `json:"sched_fifo,omitempty"`
	VolCS     int64  `json:"vol_cs"`
	InvolCS   int64  `json:"invol_cs"`
	Error     string `json:"error,omitempty"`
}

// EchoMain is the child side of a ping-pong row: it receives and returns
// Count messages over the mechanism whose descriptors it inherited as fds
// 4 and 5 and reports on fd 3. args are the arguments after the
// subcommand name. It returns the process exit code.
func EchoMain(args []string) int {
	fs := flag.NewFlagSet(EchoSubcommand, flag.ContinueOnError)
	mech := fs.String("mech", "", "mechanism")
	size := fs.Int("size", 1, "payload bytes")
	count := fs.Int("count", 0, "round trips to echo, warmup included")
	warmup := fs.Int("warmup", 0, "untimed round trips at the start (context switches are counted after them)")
	cpu := fs.Int("cpu", -1, "CPU to pin the echo thread to (-1: none)")
	fifo := fs.Bool("sched-fifo", false, "try SCHED_FIFO")
	goSys := fs.Bool("go-syscalls", false, "use unix.Read/Write (runtime-aware syscalls) instead of raw syscalls")
	fifoIn := fs.String("fifo-in", "", "fifo the parent writes")
	fifoOut := fs.String("fifo-out", "", "fifo the parent reads")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctl := os.NewFile(3, "control")
	if ctl == nil {
		fmt.Fprintln(os.Stderr, "ipcbench _echo: no control descriptor (fd 3); this subcommand is internal")
		return 2
	}
	fail := func(err error) int {
		writeReport(ctl, childReport{Phase: "done", Error: err.Error()})
		return 1
	}
	// The echo thread is locked and never unlocked: its pinning and
	// scheduling class must not leak to other goroutines.
	runtime.LockOSThread()
	if err := bench.PinThread(*cpu); err != nil {
		return fail(err)
	}
	rep := childReport{Phase: "ready", PID: os.Getpid(), SchedFIFO: "off"}
	if *fifo {
		rep.SchedFIFO = trySchedFIFO()
	}
	c, err := childConn(*mech, max(*size, 1), *fifoIn, *fifoOut, !*goSys)
	if err != nil {
		return fail(err)
	}
	rep.CPU, rep.Affinity = bench.GetCPU(), threadAffinity()
	if err := writeReport(ctl, rep); err != nil {
		return 1
	}
	if err := openFIFOIn(c, *fifoIn); err != nil {
		return fail(err)
	}
	buf := make([]byte, max(*size, 1))
	v0, i0 := threadCS()
	for i := 0; i < *count; i++ {
		if i == *warmup {
			v0, i0 = threadCS()
		}
		if err := c.recv(buf); err != nil {
			return fail(fmt.Errorf("echo %d: %w", i, err))
		}
		if err := c.send(buf); err != nil {
			return fail(fmt.Errorf("echo %d: %w", i, err))
		}
	}
	v1, i1 := threadCS()
	c.close()
	done := childReport{Phase: "done", PID: os.Getpid(), CPU: bench.GetCPU(), VolCS: v1 - v0, InvolCS: i1 - i0}
	if writeReport(ctl, done) != nil {
		return 1
	}
	return 0
}

func writeReport(w io.Writer, r childReport) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
