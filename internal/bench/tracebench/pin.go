package tracebench

import (
	"context"
	"runtime"

	"github.com/ipclab/logagg/internal/trace"
)

// pinned is a trace session whose bpftrace was forked from an OS thread
// that stays alive until release. trace.Start sets Pdeathsig, which Linux
// delivers when the *thread* that forked the child exits, not the process;
// Go destroys a thread when a goroutine exits while locked to it (the
// latency package's sender and receiver do), so without this a tracer
// could be SIGKILLed in the middle of a run. Measured: it was, in the
// overhead study, before this.
type pinned struct {
	*trace.Session
	release chan struct{}
}

// startPinned is trace.Start on a dedicated locked thread. Call Stop, then
// done, exactly once each.
func startPinned(ctx context.Context, script string, target trace.Target, opts trace.Options) (*pinned, error) {
	type result struct {
		s   *trace.Session
		err error
	}
	ch := make(chan result, 1)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		s, err := trace.Start(ctx, script, target, opts)
		ch <- result{s, err}
		if err == nil {
			<-release
		}
		// Unlock (rather than exit locked) so the thread is reused, not
		// destroyed; bpftrace has exited by now.
		runtime.UnlockOSThread()
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	return &pinned{Session: r.s, release: release}, nil
}

// done releases the thread; call it after Stop.
func (p *pinned) done() { close(p.release) }
