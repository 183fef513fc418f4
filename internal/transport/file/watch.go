package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watcher is an inotify instance watching directories (never files: one
// watch per directory covers every file in it, so 10,000 files in one
// directory cost one watch). Its fd is non-blocking and wrapped with
// os.NewFile, so waiting for events parks in Go's poller, not in a thread.
// Events only say where to look: the tailer's periodic scan stays the
// authority (inotify queues overflow, and network file systems send no
// events).
type watcher struct {
	f  *os.File
	rc interface {
		Control(func(uintptr)) error
	}
	dirs map[string]int // dir → watch descriptor
	wds  map[int]string
	buf  []byte
}

const watchMask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

func newWatcher() (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("inotify: %w", err)
	}
	return &watcher{f: f, rc: rc, dirs: map[string]int{}, wds: map[int]string{}, buf: make([]byte, 64<<10)}, nil
}

// watch adds dir; a directory already watched costs nothing.
func (w *watcher) watch(dir string) error {
	if _, ok := w.dirs[dir]; ok {
		return nil
	}
	var wd int
	err := w.rawFD(func(fd int) error {
		var err error
		wd, err = unix.InotifyAddWatch(fd, dir, watchMask)
		return err
	})
	if err != nil {
		return fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	w.dirs[dir] = wd
	w.wds[wd] = dir
	return nil
}

func (w *watcher) rawFD(fn func(fd int) error) error {
	sc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := sc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// event is what the tailer learns from one inotify event.
type event struct {
	path     string // the file the event names (dir/name), or the directory
	mask     uint32
	overflow bool // the kernel dropped events: rescan everything
}

// wait blocks until events arrive or until deadline, then passes every
// queued event to fn. It returns os.ErrDeadlineExceeded at the deadline
// (or at once when stopped reports true: interrupt was called), nil
// after events, another error on failure.
func (w *watcher) wait(deadline time.Time, stopped func() bool, fn func(event)) error {
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return err
	}
	if stopped() { // an interrupt that came before the deadline was set
		return os.ErrDeadlineExceeded
	}
	n, err := w.f.Read(w.buf)
	if err != nil {
		return err
	}
	w.parse(w.buf[:n], fn)
	return w.poll(fn)
}

// poll passes the events already queued to fn, without waiting.
func (w *watcher) poll(fn func(event)) error {
	for {
		var n int
		var rerr error
		// Control, not Read: a read deadline that passed (the last wait's)
		// must not fail a read that never waits.
		err := w.rc.Control(func(fd uintptr) {
			for {
				n, rerr = unix.Read(int(fd), w.buf)
				if rerr != unix.EINTR {
					return
				}
			}
		})
		if err != nil {
			return err
		}
		if errors.Is(rerr, unix.EAGAIN) || n <= 0 {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		w.parse(w.buf[:n], fn)
	}
}

func (w *watcher) parse(b []byte, fn func(event)) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(ev.Len)
		if size > len(b) {
			return
		}
		name := b[unix.SizeofInotifyEvent:size]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		b = b[size:]
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			fn(event{overflow: true})
			continue
		}
		dir, ok := w.wds[int(ev.Wd)]
		if !ok {
			continue
		}
		if ev.Mask&unix.IN_IGNORED != 0 { // the directory went away
			delete(w.wds, int(ev.Wd))
			delete(w.dirs, dir)
			fn(event{path: dir, mask: ev.Mask})
			continue
		}
		p := dir
		if len(name) > 0 {
			p = filepath.Join(dir, string(name))
		}
		fn(event{path: p, mask: ev.Mask})
	}
}

// interrupt makes a blocked wait return now.
func (w *watcher) interrupt() { _ = w.f.SetReadDeadline(time.Now()) }

func (w *watcher) close() error { return w.f.Close() }
