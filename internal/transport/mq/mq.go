// Package mq is the mq:// transport: a POSIX message queue.
//
// URL: mq:///NAME?maxmsg=N&msgsize=N
//
//   - maxmsg: queue capacity in messages (default fs.mqueue.msg_max).
//   - msgsize: largest message in bytes (default fs.mqueue.msgsize_max).
//
// The listener takes the queue's lock (transport.LockName: a lock file in
// transport.LockDir(), /run/logagg/mq.NAME.lock for root), so a second
// instance fails with transport.ErrInUse instead of splitting the records.
// It then creates the queue (O_CREAT|O_EXCL|O_RDONLY|O_NONBLOCK) and sets
// exactly --socket-mode and --socket-group through the descriptor, whatever
// the umask. An existing queue (left by a previous run, or created by
// someone else while we restarted: the name is unlinked at every shutdown)
// is reused, with its messages and attributes, only if it is ours and no
// more open than configured (transport.CheckOwned); otherwise start-up
// fails with transport.ErrForeign naming its owner and mode, and the queue
// is left alone. One message holds one or more records separated by
// '\n'. Senders block in mq_send while the queue is full: backpressure. A
// message cannot be longer than msgsize (the sender gets EMSGSIZE), so the
// effective maximum record is min(--max-record, msgsize).
//
// Limits: the kernel's fs.mqueue.msg_max and msgsize_max are read at start
// and reported in the start-up log line. msgsize is chosen as:
//   - ?msgsize= if given: the user sized this queue, and the listener's
//     effective maximum record is min(--max-record, msgsize);
//   - else, if --max-record was changed from its default, the larger of
//     fs.mqueue.msgsize_max and --max-record+1 (the +1 is the newline);
//   - else fs.mqueue.msgsize_max (the default --max-record, 256 KiB, is far
//     above the kernel default msgsize_max of 8 KiB, so msgsize bounds records).
//
// When the kernel refuses the queue (EINVAL: above the sysctls without
// CAP_SYS_RESOURCE; EMFILE: RLIMIT_MSGQUEUE), or an existing queue's
// msgsize cannot carry an explicit --max-record, start-up fails with
// ErrLimit and a message naming the sysctl and the flag: never silent
// truncation. Records longer than --max-record inside a message are
// truncated and flagged as on every transport; a message longer than
// msgsize never enters the queue (the sender gets EMSGSIZE).

// Peer identity: the kernel does not tell a receiver who sent a message,
// so records carry no peer fields.
//
// # Lifecycle
//
// Open creates the queue. Run waits for messages with Go's poller (a
// queue descriptor is pollable on Linux) and never spins. When ctx ends Run
// unlinks the name (new senders fail with ENOENT), drains what the queue
// holds and what senders that already had it open send within
// Options.DrainGrace, submits it, counts anything left as dropped
// (drain_timeout), closes the descriptor and returns. We remove our socket
// files on shutdown, so we remove the queue too.
package mq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
)

// Scheme is the URL scheme of this transport.
const Scheme = "mq"

// ErrLimit is returned by New when the kernel's queue limits cannot hold
// the configured record size.
var ErrLimit = errors.New("mq: queue limit too small")

func init() { transport.Register(Scheme, New) }

// Listener serves one POSIX message queue.
type Listener struct {
	url     string
	name    string
	lock    *transport.Lock
	q       *mqueue.Queue
	msgsize int
	d       transport.Deps
	once    sync.Once
}

// Name returns the queue name of an mq:// URL ("/NAME").
func Name(u *url.URL) (string, error) {
	p := u.Path
	if u.Host != "" {
		p = "/" + u.Host + u.Path
	}
	if p == "" {
		p = u.Opaque
	}
	n := strings.TrimPrefix(p, "/")
	if n == "" || strings.Contains(n, "/") || len(n) > 255 {
		return "", fmt.Errorf("%w: %s: want mq:///NAME with a single-component name", transport.ErrBadAddress, u.Redacted())
	}
	return "/" + n, nil
}

// New creates or opens the queue of u (the transport.Factory for "mq").
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	name, err := Name(u)
	if err != nil {
		return nil, err
	}
	lim, err := mqueue.ReadLimits()
	if err != nil {
		return nil, err
	}
	attr := mqueue.Attr{MaxMsg: int64(lim.MsgMax), MsgSize: int64(lim.MsgSizeMax)}
	q := u.Query()
	explicit := false
	// An explicit ?msgsize= (parsed below) overrides this.
	explicitRecord := d.Opts.MaxRecord > 0 && d.Opts.MaxRecord != transport.DefaultOptions().MaxRecord &&
		q.Get("msgsize") == ""
	if explicitRecord {
		attr.MsgSize = max(attr.MsgSize, int64(d.Opts.MaxRecord)+1)
	}
	for k, vs := range q {
		n, err := strconv.Atoi(vs[0])
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: %s: %s must be a positive integer", transport.ErrBadAddress, u.Redacted(), k)
		}
		switch k {
		case "maxmsg":
			attr.MaxMsg = int64(n)
		case "msgsize":
			attr.MsgSize = int64(n)
		default:
			return nil, fmt.Errorf("%w: %s: unknown parameter %q (known: maxmsg, msgsize)", transport.ErrBadAddress, u.Redacted(), k)
		}
		explicit = true
	}
	lock, err := transport.LockName(Scheme, name)
	if err != nil {
		return nil, fmt.Errorf("mq: queue %s: %w", name, err)
	}
	l, err := open(u, name, d, attr, lim, explicit, explicitRecord)
	if err != nil {
		lock.Release()
		return nil, err
	}
	l.lock = lock
	return l, nil
}

// open creates or reuses the queue; the caller holds its lock.
func open(u *url.URL, name string, d transport.Deps, attr mqueue.Attr, lim mqueue.Limits, explicit, explicitRecord bool) (*Listener, error) {
	// Created with 0600 (less the umask) and opened up to the configured
	// mode below, through the descriptor: never more open than configured.
	mq, err := mqueue.Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_NONBLOCK, 0o600, &attr)
	reused := false
	what := "queue " + name
	if errors.Is(err, unix.EEXIST) {
		// Left by a previous run of ours: keep its messages and its
		// attributes. Anyone else's is refused (see package doc).
		mq, err = mqueue.Open(name, unix.O_RDONLY|unix.O_NONBLOCK, 0, nil)
		if errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%w: %s exists and we may not read it: another user's, never reused", transport.ErrForeign, what)
		}
		if err == nil {
			var st unix.Stat_t
			if err = unix.Fstat(mq.FD(), &st); err == nil {
				err = transport.CheckOwned(what, &st, d.Opts)
			}
			if err != nil {
				mq.Close()
				return nil, err
			}
		}
		reused = true
	}
	if errors.Is(err, unix.EINVAL) && (explicit || explicitRecord) {
		if explicitRecord {
			return nil, fmt.Errorf("%w: mq msgsize_max is %d < --max-record %d: raise fs.mqueue.msgsize_max or lower --max-record / set ?msgsize= (kernel: %w)",
				ErrLimit, lim.MsgSizeMax, d.Opts.MaxRecord, err)
		}
		return nil, fmt.Errorf("%w: %s asks for maxmsg=%d msgsize=%d but fs.mqueue.msg_max is %d and fs.mqueue.msgsize_max is %d: raise them (sysctl -w fs.mqueue.msgsize_max=N fs.mqueue.msg_max=N) or lower ?maxmsg= / ?msgsize= (kernel: %w)",
			ErrLimit, u.Redacted(), attr.MaxMsg, attr.MsgSize, lim.MsgMax, lim.MsgSizeMax, err)
	}
	if errors.Is(err, unix.EMFILE) {
		return nil, fmt.Errorf("%w: %s: maxmsg*msgsize exceeds RLIMIT_MSGQUEUE (ulimit -q) or the queue count fs.mqueue.queues_max=%d: %w",
			ErrLimit, u.Redacted(), lim.QueuesMax, err)
	}
	if err != nil {
		return nil, fmt.Errorf("mq: open %s: %w", name, err)
	}
	got, err := mq.Attr()
	if err != nil {
		mq.Close()
		return nil, err
	}
	if explicitRecord && int64(d.Opts.MaxRecord) > got.MsgSize {
		mq.Close()
		if !reused {
			mqueue.Unlink(name)
		}
		return nil, fmt.Errorf("%w: mq msgsize is %d (fs.mqueue.msgsize_max %d) < --max-record %d: raise fs.mqueue.msgsize_max and set ?msgsize=, or lower --max-record",
			ErrLimit, got.MsgSize, lim.MsgSizeMax, d.Opts.MaxRecord)
	}
	if err := transport.ApplyPerms(mq.FD(), what, d.Opts); err != nil {
		mq.Close()
		if !reused {
			mqueue.Unlink(name)
		}
		return nil, fmt.Errorf("mq: %w", err)
	}
	if d.Log != nil {
		d.Log.Info("listening", "url", u.String(), "transport", Scheme, "queue", name, "reused", reused,
			"maxmsg", got.MaxMsg, "msgsize", got.MsgSize, "msg_max", lim.MsgMax, "msgsize_max", lim.MsgSizeMax,
			"max_record", min(int64(d.Opts.MaxRecord), got.MsgSize))
	}
	return &Listener{url: u.String(), name: name, q: mq, msgsize: int(got.MsgSize), d: d}, nil
}

// URL implements transport.Listener.
func (l *Listener) URL() string { return l.url }

// Close implements transport.Listener: for a listener whose Run was never
// called it closes and unlinks the queue and releases its lock; after Run
// it does nothing.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.q.Close()
		mqueue.Unlink(l.name)
		l.lock.Release()
	})
	return err
}

// Run implements transport.Listener.
func (l *Listener) Run(ctx context.Context) error {
	var runErr error
	l.once.Do(func() { runErr = l.run(ctx) })
	return runErr
}

func (l *Listener) run(ctx context.Context) error {
	// The name is unlinked below while we hold the lock; the lock goes
	// last, so no second instance can create the queue meanwhile and see
	// ours vanish under it.
	defer l.lock.Release()
	f := l.q.File()
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("mq: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Now()) })
	defer stop()
	meta := record.Meta{Transport: Scheme, Listener: l.url, ParseHostname: true}
	meta.Prepare()
	e := l.d.Sink.Emitter(l.d.Metrics)
	message := func(f []byte) {
		if e.Pending() == 0 {
			meta.RecvNS = time.Now().UnixNano()
		}
		e.Received(len(f))
		e.Message(f, l.d.Opts.MaxRecord, false, &meta)
	}
	buf := make([]byte, l.msgsize)
	l.d.Memory().Add(metrics.MemReadBuffers, int64(len(buf)))
	defer l.d.Memory().Add(metrics.MemReadBuffers, -int64(len(buf)))
	var n int
	var rerr error
	recv := func(fd uintptr) bool {
		n, rerr = mqueue.ReceiveFD(int(fd), buf)
		return !errors.Is(rerr, unix.EAGAIN)
	}
	for ctx.Err() == nil {
		rc.Control(func(fd uintptr) { recv(fd) })
		if errors.Is(rerr, unix.EAGAIN) {
			// Idle: hand over what we have before sleeping in the poller.
			e.Flush()
			if err := rc.Read(recv); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				return fmt.Errorf("mq: wait on %s: %w", l.name, err)
			}
		}
		if rerr != nil && !errors.Is(rerr, unix.EAGAIN) {
			return fmt.Errorf("mq: receive on %s: %w", l.name, rerr)
		}
		if rerr == nil {
			message(buf[:n])
		}
		if e.Err() != nil {
			break
		}
	}
	// Shutdown: no new senders, then take what the queue holds and what
	// senders that already had it open send within the grace period.
	mqueue.Unlink(l.name)
	end := time.Now().Add(l.d.Opts.DrainGrace)
	// Past the hard stop messages are still taken, within the grace
	// period, and counted as dropped: the queue's name is gone, so what is
	// left in it is lost anyway.
	rc.Control(func(fd uintptr) {
		for {
			n, rerr = mqueue.ReceiveFD(int(fd), buf)
			left := time.Until(end)
			if rerr == nil {
				message(buf[:n])
				if left > 0 {
					continue
				}
				break
			}
			if !errors.Is(rerr, unix.EAGAIN) || left <= 0 {
				break
			}
			e.Flush()
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if k, _ := unix.Poll(pfd, int(left.Milliseconds())+1); k <= 0 {
				break
			}
		}
		if a, err := mqueue.AttrFD(int(fd)); err == nil && a.CurMsgs > 0 {
			if m := l.d.Metrics; m != nil {
				m.Drop(metrics.CauseDrainTimeout, int(a.CurMsgs))
			}
		}
	})
	e.Flush()
	e.Release()
	return nil
}
