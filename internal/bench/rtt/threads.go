package rtt

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bench"
)

// Seed 001's bench2 reports a median of 74 TSC cycles per "single core"
// round trip with no context switch. Two sides on one CPU cannot hand over
// in 74 cycles: every hand-off is a switch from one thread to the other.
// So the single-core experiment is measured three ways, each named for
// what it is:
//
//   - shm-1core-threads: the seed's intent, two threads of this process
//     pinned to one CPU, taking turns through one shared cache line with a
//     sched_yield hand-off. A thread switch, without the address-space
//     switch of the process version.
//   - shm-1core-procs: the same between two processes (a process switch
//     per hand-off).
//   - shm-serial: one thread writes the ping, reads it as the echo side,
//     writes the pong and reads it: the cost of the shared-memory protocol
//     itself with no hand-off, which is what a figure of tens of cycles
//     can measure.

// anonShared maps the zeroed memory the two threads of an in-process row
// share (the layout of shm.go).
func anonShared(size int) ([]byte, error) {
	mem, err := unix.Mmap(-1, 0, shmSize(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return mem, nil
}

// measureThreads runs shm-1core-threads; the caller is the locked
// measuring thread, the echo side is a second locked thread pinned to the
// same CPU.
func measureThreads(o *Options, size, cpu int) (Row, error) {
	mem, err := anonShared(size)
	if err != nil {
		return Row{}, err
	}
	defer unix.Munmap(mem)
	if runtime.GOMAXPROCS(0) < 2 {
		// Each thread keeps its P while it polls (a raw sched_yield never
		// gives it up); with one P the echo thread would only get to run
		// when the runtime preempts the measuring one, every 10 ms.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	raw := !o.GoSyscalls
	measure, echo := shmOver(mem, size, waitYield, raw), shmOver(mem, size, waitYield, raw)
	type echoResult struct {
		side Side
		err  error
	}
	ready, done := make(chan error, 1), make(chan echoResult, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, as in measureGo
		side, err := prepareSelf(o, cpu)
		ready <- err
		if err != nil {
			return
		}
		side.CPUStart = bench.GetCPU()
		side.VolCS, side.InvolCS, err = echoLoop(echo, make([]byte, size), o.Warmup+o.Iterations, o.Warmup)
		side.CPUEnd = bench.GetCPU()
		done <- echoResult{side, err}
	}()
	if err := <-ready; err != nil {
		return Row{}, fmt.Errorf("echo thread: %w", err)
	}
	side, err := prepareSelf(o, cpu)
	var row Row
	if err == nil {
		row, err = measuredRow(o, measure, size, side, nil)
	}
	if err != nil {
		measure.kill() // the echo thread returns from its wait
	}
	echoed := <-done
	if err != nil {
		return Row{}, err
	}
	if echoed.err != nil {
		return Row{}, fmt.Errorf("echo thread: %w", echoed.err)
	}
	row.Child = &echoed.side
	return row, nil
}

// echoLoop returns count messages on c and counts the context switches
// after the first warmup ones.
func echoLoop(c conn, buf []byte, count, warmup int) (vol, invol int64, err error) {
	v0, i0 := threadCS()
	for i := 0; i < count; i++ {
		if i == warmup {
			v0, i0 = threadCS()
		}
		if err := c.recv(buf); err != nil {
			return 0, 0, fmt.Errorf("echo %d: %w", i, err)
		}
		if err := c.send(buf); err != nil {
			return 0, 0, fmt.Errorf("echo %d: %w", i, err)
		}
	}
	v1, i1 := threadCS()
	return v1 - v0, i1 - i0, nil
}

// serialConn plays both sides of shm-serial in one thread: send writes the
// ping and does the echo side's turn (read the ping, write the pong), recv
// reads the pong. No wait ever finds the line unwritten.
type serialConn struct {
	measure, echo *shmConn
	buf           []byte
}

func (c *serialConn) send(p []byte) error {
	if err := c.measure.send(p); err != nil {
		return err
	}
	if err := c.echo.recv(c.buf); err != nil {
		return err
	}
	return c.echo.send(c.buf)
}

func (c *serialConn) recv(p []byte) error { return c.measure.recv(p) }

func (c *serialConn) close() {}

// measureSerial runs shm-serial on the calling locked thread.
func measureSerial(o *Options, size, cpu int) (Row, error) {
	mem, err := anonShared(size)
	if err != nil {
		return Row{}, err
	}
	defer unix.Munmap(mem)
	side, err := prepareSelf(o, cpu)
	if err != nil {
		return Row{}, err
	}
	c := &serialConn{measure: shmOver(mem, size, waitSpin, true), echo: shmOver(mem, size, waitSpin, true), buf: make([]byte, size)}
	return measuredRow(o, c, size, side, nil)
}
