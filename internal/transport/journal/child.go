package journal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/jsonstr"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
)

// args are journalctl's arguments: the export format, the URL's
// directory and matches, and mode (where to start, whether to follow).
func (l *Listener) args(mode ...string) []string {
	// --merge: without it, journalctl 252 --follow reads only the
	// journal's last boot (as if --boot were given), which after a
	// reboot would skip what the previous boot wrote after the
	// checkpoint; it also makes sd-journal give up on a whole file at
	// an unreadable entry instead of skipping the entry. It reads every
	// journal in the system journal's directories, see the package doc.
	a := []string{"--output=export", "--no-pager", "--merge"}
	if l.cfg.dir != "" {
		a = append(a, "--directory="+l.cfg.dir)
	}
	a = append(a, mode...)
	for _, u := range l.cfg.units {
		a = append(a, "--unit="+u)
	}
	if len(l.cfg.matches) > 0 {
		a = append(a, "--")
		a = append(a, l.cfg.matches...)
	}
	return a
}

// followArgs are journalctl's arguments to follow after cursor, or when
// there is none from the start (or, with fromNow, from the next entry).
func (l *Listener) followArgs(cursor string, fromNow bool) []string {
	switch {
	case cursor != "":
		return l.args("--follow", "--after-cursor="+cursor)
	case fromNow:
		return l.args("--follow", "--lines=0")
	}
	return l.args("--follow", "--no-tail") // every entry, not the last ten
}

// command is journalctl with args: no pager, no colours, in a process
// group of its own (a terminal's ^C is the aggregator's to handle), and
// killed if the aggregator dies (Pdeathsig).
func (l *Listener) command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, l.journalctl, args...)
	cmd.Env = append(os.Environ(), "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0", "SYSTEMD_LOG_COLOR=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

// resolveEnd makes "from=end" concrete on a first run: reading resumes
// after the journal's last entry (of those the URL selects) at start-up,
// and that cursor is saved at once, so an aggregator killed before the
// next entry still starts there, not at whatever is the end by then. An
// empty journal is read from its start. If the last entry cannot be
// found, journalctl follows from its next entry on (--lines=0).
func (r *reader) resolveEnd(ctx context.Context) {
	l := r.l
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := l.command(cctx, l.args("--lines=1"))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	var cursor []byte
	d := NewDecoder(&out)
	for {
		e, derr := d.Next()
		if derr != nil {
			break
		}
		if c := fieldValue(e, "__CURSOR"); c != nil {
			cursor = append(cursor[:0], c...)
		}
	}
	if err != nil {
		r.fromNow = true
		l.log.Warn("journal: the last entry could not be found; following from the next one", "err", err,
			"stderr", string(bytes.TrimSpace(stderr.Bytes())))
		return
	}
	if cursor == nil {
		return // an empty journal: everything in it is new
	}
	r.cursor = append(r.cursor[:0], cursor...)
	if err := saveCheckpoint(l.ckptPath, l.cfg.url, string(cursor)); err != nil {
		l.log.Warn("journal checkpoint not saved", "path", l.ckptPath, "err", err)
		return
	}
	l.mu.Lock()
	l.saved = markCursor{cursor: string(cursor)}
	l.mu.Unlock()
}

// started is a journalctl that runs, and how its end is learnt.
type started struct {
	cmd    *exec.Cmd
	stdout *os.File
	exited chan error // its exit status, once
}

// start starts journalctl following after cursor. It is forked from an
// OS thread that stays alive until journalctl exits: Linux sends
// Pdeathsig when the forking *thread* ends, and Go ends a thread when a
// goroutine exits while locked to it (ADR 0056).
func (r *reader) start() (*started, error) {
	l := r.l
	cmd := l.command(context.Background(), l.followArgs(string(r.cursor), r.fromNow))
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	// A pipe as large as the kernel allows an unprivileged process
	// (fs.pipe-max-size, 1 MiB by default): journalctl goes on writing
	// while the reader pauses or hands records over.
	if n := pipeMaxSize(); n > 0 {
		if rc, err := pr.SyscallConn(); err == nil { // not Fd(): it would make the pipe blocking
			rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n) })
		}
	}
	cmd.Stdout, cmd.Stderr = pw, ew
	s := &started{cmd: cmd, stdout: pr, exited: make(chan error, 1)}
	startErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		startErr <- err
		if err == nil {
			s.exited <- cmd.Wait()
		}
		runtime.UnlockOSThread()
	}()
	err = <-startErr
	pw.Close()
	ew.Close()
	if err != nil {
		pr.Close()
		er.Close()
		return nil, fmt.Errorf("start %s: %w", l.journalctl, err)
	}
	go r.stderr(er, cmd.Process.Pid)
	return s, nil
}

// stderr logs what journalctl says, line by line (each cut at 1 KiB),
// until it exits.
func (r *reader) stderr(f *os.File, pid int) {
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1024), 1024)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return i + 1, data[:i], nil
		}
		if len(data) >= 1024 || (atEOF && len(data) > 0) {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			r.l.log.Warn("journalctl", "pid", pid, "says", string(line))
		}
	}
}

// follow runs journalctl once and emits what it reads, until ctx ends,
// the hard stop, or journalctl ends or writes what is not the export
// format. journalctl is killed and reaped before follow returns.
func (r *reader) follow(ctx context.Context) error {
	s, err := r.start()
	if err != nil {
		return err
	}
	defer s.stdout.Close()
	stop := context.AfterFunc(ctx, func() { s.stdout.SetReadDeadline(time.Now()) })
	d := r.l.decoder(&flushReader{r: r, f: s.stdout, coalesce: readCoalesce})
	// The decoder's buffer grows to the largest entry (at most about
	// MaxEntry+MaxValue): a read buffer, counted as the others are.
	mem, counted := r.l.d.Memory(), 0
	defer func() { mem.Add(metrics.MemReadBuffers, -int64(counted)) }()
	for {
		ent, err := d.Next()
		if h := d.Held(); h != counted {
			mem.Add(metrics.MemReadBuffers, int64(h-counted))
			counted = h
		}
		if err != nil {
			stop()
			// Killed, not asked: journalctl holds nothing that could be
			// lost, and what it had not written is read again after the
			// cursor.
			exit := r.kill(s)
			switch {
			case ctx.Err() != nil, r.e.Err() != nil:
				return errStopped
			case errors.Is(err, ErrMalformed):
				if r.l.m != nil {
					r.l.m.DecodeError(KindExport, 1)
				}
				return fmt.Errorf("journalctl's output: %w", err)
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				if exit == nil {
					return errors.New("journalctl exited with status 0")
				}
				return fmt.Errorf("journalctl exited: %w", exit)
			}
			return err
		}
		if !r.emit(ctx, ent) {
			stop()
			r.kill(s)
			return errStopped
		}
	}
}

// decoder decodes journalctl's output from in, within the limits that
// max_record sets: values cut at it, entries at four times it (1 MiB at
// least).
func (l *Listener) decoder(in io.Reader) *Decoder {
	d := NewDecoder(in)
	d.MaxValue = l.d.Opts.MaxRecord
	d.MaxEntry = max(4*l.d.Opts.MaxRecord, DefaultMaxEntry)
	return d
}

// kill kills journalctl and waits for its exit, at most a second: one
// stuck in the kernel (a hung file system) must not hold the aggregator's
// shutdown; it is reaped whenever it ends.
func (r *reader) kill(s *started) error {
	s.cmd.Process.Kill()
	select {
	case err := <-s.exited:
		return err
	case <-time.After(time.Second):
		r.l.log.Warn("journalctl did not end when killed; going on without it", "pid", s.cmd.Process.Pid)
		return errors.New("journalctl did not end when killed")
	}
}

// flushReader hands the Emitter's records over before each read of
// journalctl's output, which may wait: records never sit in a batch
// while the input is idle. After a read that emptied the pipe it pauses
// (coalesce) before reading again: journalctl writes its output 4 KiB
// (six entries) at a time, and reading each write as it comes cost a
// wake-up and a hand-over per six entries (ADR 0056).
type flushReader struct {
	r        *reader
	f        *os.File
	coalesce time.Duration
	short    bool // the last read emptied the pipe
}

func (f *flushReader) Read(p []byte) (int, error) {
	r := f.r
	if r.e.Pending() > 0 {
		if r.mark > r.sealedMark {
			r.l.sealed(r.mark, r.cursor)
			r.sealedMark = r.mark
		}
		if err := r.e.Flush(); err != nil {
			return 0, err
		}
	}
	if f.short && f.coalesce > 0 {
		time.Sleep(f.coalesce)
	}
	n, err := f.f.Read(p)
	f.short = n > 0 && n < len(p)
	return n, err
}

// readCoalesce is flushReader's pause (a variable for benchmarks).
var readCoalesce = time.Millisecond

// Decode error kinds of the journal input (decode_errors_total{kind}).
const (
	// KindExport: journalctl wrote what is not the export format (it is
	// started again after the last entry read).
	KindExport = "journal_export"
	// KindGap counts entries the journal skipped: sequence numbers of one
	// journal sequence that never came (corrupt entries, files deleted or
	// ignored before they were read).
	KindGap = "journal_gap"
	// KindFile counts journal files journalctl cannot read (truncated,
	// not a journal file): it ignores them.
	KindFile = "journal_file"
)

// checkGap compares the entry's place in its journal sequence (cursor
// fields s= and i=, hexadecimal) with the previous entry of that
// sequence: journald numbers every entry it writes, across files and
// rotations, so a jump means entries the journal did not give us. Only
// without matches: a match skips entries on purpose.
func (r *reader) checkGap(cursor []byte) {
	seq, num, ok := parseCursor(cursor)
	if !ok {
		return
	}
	if r.seqnums == nil {
		r.seqnums = map[string]uint64{}
		if s0, n0, ok := parseCursor(r.cursor); ok { // where this run resumed
			r.seqnums[string(s0)] = n0
		}
	}
	// Entries come in runs of one sequence: the map (a string key
	// allocated per store) is used only when the sequence changes.
	seen := true
	if !bytes.Equal(seq, r.curSeq) {
		if r.curSeq != nil {
			if len(r.seqnums) >= 1024 {
				clear(r.seqnums) // bounded: journals come and go with boots and machines
			}
			r.seqnums[string(r.curSeq)] = r.curNum
		}
		r.curSeq = append(r.curSeq[:0], seq...)
		r.curNum, seen = r.seqnums[string(seq)]
	}
	last := r.curNum
	r.curNum = num
	if !seen || num <= last+1 {
		return
	}
	missing := num - last - 1
	if r.l.m != nil {
		r.l.m.DecodeError(KindGap, int(min(missing, 1<<31)))
	}
	r.l.log.Warn("journal: entries missing (corrupt, unreadable, or deleted before they were read)",
		"missing", missing, "sequence", string(seq), "after", last, "before", num)
	msg := "journal: " + strconv.FormatUint(missing, 10) + " entries missing in sequence " + string(seq) +
		" between numbers " + strconv.FormatUint(last, 10) + " and " + strconv.FormatUint(num, 10) +
		" (corrupt, unreadable, or deleted before they were read)"
	r.emitNotice(msg, "gap", `"missing":`+strconv.FormatUint(missing, 10))
}

// emitNotice emits a record about the input itself: {"message":…,
// "event":"journal_error","cause":cause, extra…}.
func (r *reader) emitNotice(msg, cause, extra string) {
	r.notice = appendNotice(r.notice[:0], msg, cause, extra)
	meta := *r.meta
	meta.Peer = record.Peer{}
	meta.Prepare()
	r.e.Emit(r.notice, &meta, 0)
	r.handOver()
}

func appendNotice(b []byte, msg, cause, extra string) []byte {
	b = append(b, `{"message":"`...)
	b = jsonstr.AppendEscapedString(b, msg)
	b = append(b, `","event":"journal_error","cause":"`...)
	b = jsonstr.AppendEscapedString(b, cause)
	b = append(b, '"')
	if extra != "" {
		b = append(b, ',')
		b = append(b, extra...)
	}
	return append(b, '}')
}

// parseCursor finds a cursor's sequence id (s=) and number (i=, hex).
func parseCursor(c []byte) (seq []byte, num uint64, ok bool) {
	var haveS, haveI bool
	for len(c) > 0 {
		var part []byte
		part, c, _ = bytes.Cut(c, []byte(";"))
		switch {
		case bytes.HasPrefix(part, []byte("s=")):
			seq, haveS = part[2:], true
		case bytes.HasPrefix(part, []byte("i=")):
			n, err := strconv.ParseUint(string(part[2:]), 16, 64)
			if err != nil {
				return nil, 0, false
			}
			num, haveI = n, true
		}
	}
	return seq, num, haveS && haveI && len(seq) > 0
}

// noticeEmitter is an Emitter of its own for notices from another
// goroutine than the reader's (the file watcher).
type noticeEmitter struct {
	e    *sink.Emitter
	meta *record.Meta
	buf  []byte
}

func newNoticeEmitter(s *sink.Sink, m *metrics.Listener, url string) *noticeEmitter {
	meta := &record.Meta{Transport: Transport, Listener: url}
	meta.Prepare()
	return &noticeEmitter{e: s.Emitter(m), meta: meta}
}

func (n *noticeEmitter) emit(msg, cause, extra string) {
	n.buf = appendNotice(n.buf[:0], msg, cause, extra)
	n.meta.RecvNS = time.Now().UnixNano()
	n.e.Emit(n.buf, n.meta, 0)
	n.e.Flush()
}

func (n *noticeEmitter) release() {
	n.e.Flush()
	n.e.Release()
}

// pipeMaxSize is the largest pipe an unprivileged F_SETPIPE_SZ may ask for.
func pipeMaxSize() int {
	b, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(string(bytes.TrimSpace(b)))
	return n
}
