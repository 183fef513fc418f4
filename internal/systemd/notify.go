package systemd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Notifier sends state changes to the service manager's notification
// socket. A nil *Notifier (no $NOTIFY_SOCKET) accepts every call and sends
// nothing, so callers need not ask whether they run under systemd.
type Notifier struct {
	addr *unix.SockaddrUnix
	mu   sync.Mutex
	fd   int // -1 once closed
}

// NewNotifier returns a Notifier for $NOTIFY_SOCKET (a path, or an
// abstract name when it starts with "@"), or nil when it is unset. The
// variable is left set: sd_notify(3) clients in the same process may read
// it too, and children of the daemon are not expected.
func NewNotifier() (*Notifier, error) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil, nil
	}
	if !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "@") {
		return nil, fmt.Errorf("NOTIFY_SOCKET=%q: want an absolute path or an @abstract name", path)
	}
	// One unbound datagram socket, and a destination per send: a manager
	// that re-creates its socket (daemon-reexec) is reached again. A
	// blocking send: the manager reads promptly, and a message that
	// matters (READY=1, STOPPING=1) must not be dropped.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	// x/sys/unix reads a leading '@' as an abstract name, as systemd does.
	return &Notifier{addr: &unix.SockaddrUnix{Name: path}, fd: fd}, nil
}

// Notify sends the given assignments ("READY=1", "STATUS=…") as one
// datagram. The manager reads the sender's pid from the kernel's
// credentials, so it must be sent by the main process (NotifyAccess=main).
func (n *Notifier) Notify(states ...string) error {
	if n == nil || len(states) == 0 {
		return nil
	}
	msg := strings.Join(states, "\n")
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd < 0 {
		return errors.New("notify: closed")
	}
	if err := unix.Sendto(n.fd, []byte(msg), unix.MSG_NOSIGNAL, n.addr); err != nil {
		return fmt.Errorf("notify %s: %w", n.addr.Name, err)
	}
	return nil
}

// Close releases the socket. Later Notify calls fail.
func (n *Notifier) Close() error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd < 0 {
		return nil
	}
	err := unix.Close(n.fd)
	n.fd = -1
	return err
}

// WatchdogInterval is how often to send "WATCHDOG=1": half of
// $WATCHDOG_USEC, as sd_watchdog_enabled(3) advises, or 0 when no
// watchdog is asked for or $WATCHDOG_PID names another process.
func WatchdogInterval() (time.Duration, error) {
	us := os.Getenv("WATCHDOG_USEC")
	if us == "" {
		return 0, nil
	}
	if p := os.Getenv("WATCHDOG_PID"); p != "" {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return 0, fmt.Errorf("WATCHDOG_PID=%q is not a pid", p)
		}
		if pid != os.Getpid() {
			return 0, nil
		}
	}
	v, err := strconv.ParseUint(us, 10, 63)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("WATCHDOG_USEC=%q is not a positive number of microseconds", us)
	}
	return time.Duration(v) * time.Microsecond / 2, nil
}
