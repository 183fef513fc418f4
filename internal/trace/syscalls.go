package trace

import (
	"strconv"
	"strings"
)

// SyscallName returns the name of x86_64 syscall number nr (the key of
// producer_syscalls' @syscalls map), or "syscall_N" when it is unknown.
func SyscallName(nr int) string {
	if n, ok := syscallNames[nr]; ok {
		return n
	}
	return "syscall_" + strconv.Itoa(nr)
}

// Category says where a syscall comes from, for the per-record syscall table.
type Category string

const (
	// Runtime syscalls are made by the Go runtime whatever the transport:
	// scheduling, parking, signals, memory, the netpoller.
	Runtime Category = "runtime"
	// Transport syscalls move or set up the data path: sockets, fifos,
	// message queues, the segment log's writes and fsyncs.
	Transport Category = "transport"
	// Other is everything else (process start-up, file metadata, ...).
	Other Category = "other"
)

// The runtime set is what a Go program makes with no I/O at all (measured
// with producer_syscalls on an idle Go process and read from the runtime's
// sys_linux_amd64.s); epoll_* belong here because the netpoller waits the
// same way for every transport. openat/close/fcntl/read are listed as
// transport because a fifo transport opens its path per producer; the Go
// runtime's own few start-up opens are constant per process and vanish when
// counts are divided by records sent.
var categories = map[string]Category{
	"futex": Runtime, "futex_waitv": Runtime, "futex_wait": Runtime, "futex_wake": Runtime,
	"nanosleep": Runtime, "clock_nanosleep": Runtime, "clock_gettime": Runtime, "gettimeofday": Runtime,
	"epoll_pwait": Runtime, "epoll_pwait2": Runtime, "epoll_wait": Runtime, "epoll_ctl": Runtime,
	"epoll_create1": Runtime, "epoll_create": Runtime, "eventfd2": Runtime, "pipe2": Runtime,
	"sched_yield": Runtime, "sched_getaffinity": Runtime, "getrandom": Runtime,
	"rt_sigprocmask": Runtime, "rt_sigaction": Runtime, "rt_sigreturn": Runtime, "sigaltstack": Runtime,
	"tgkill": Runtime, "tkill": Runtime, "kill": Runtime, "getpid": Runtime, "gettid": Runtime,
	"mmap": Runtime, "munmap": Runtime, "madvise": Runtime, "mprotect": Runtime, "brk": Runtime, "mincore": Runtime,
	"clone": Runtime, "clone3": Runtime, "exit": Runtime, "exit_group": Runtime,
	"rseq": Runtime, "set_robust_list": Runtime, "set_tid_address": Runtime, "arch_prctl": Runtime,
	"prlimit64": Runtime, "getrlimit": Runtime, "setitimer": Runtime, "timer_create": Runtime,
	"timer_settime": Runtime, "timer_delete": Runtime, "uname": Runtime,

	"write": Transport, "writev": Transport, "pwrite64": Transport, "pwritev": Transport,
	"read": Transport, "readv": Transport, "pread64": Transport,
	"sendto": Transport, "sendmsg": Transport, "sendmmsg": Transport,
	"recvfrom": Transport, "recvmsg": Transport, "recvmmsg": Transport,
	// Detached readers (unix stream, datagram sockets) wait for their
	// socket in poll(2) instead of the netpoller's epoll.
	"poll": Transport, "ppoll": Transport,
	"socket": Transport, "socketpair": Transport, "connect": Transport, "bind": Transport,
	"listen": Transport, "accept": Transport, "accept4": Transport, "shutdown": Transport,
	"setsockopt": Transport, "getsockopt": Transport, "getsockname": Transport, "getpeername": Transport,
	"openat": Transport, "open": Transport, "close": Transport, "fcntl": Transport, "mknodat": Transport,
	"splice": Transport, "tee": Transport, "vmsplice": Transport, "sendfile": Transport,
	"fsync": Transport, "fdatasync": Transport, "sync_file_range": Transport,
	"mq_open": Transport, "mq_timedsend": Transport, "mq_timedreceive": Transport, "mq_unlink": Transport,
	"mq_notify": Transport, "mq_getsetattr": Transport,
	"io_uring_setup": Transport, "io_uring_enter": Transport, "io_uring_register": Transport,
}

// CategoryOf classifies a syscall name (as SyscallName returns it, or with a
// "sys_enter_" prefix or tracepoint path as the seed's maps have it).
func CategoryOf(name string) Category {
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	name = strings.TrimPrefix(name, "sys_enter_")
	name = strings.TrimPrefix(name, "sys_exit_")
	if c, ok := categories[name]; ok {
		return c
	}
	return Other
}
