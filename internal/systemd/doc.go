// Package systemd speaks the two small protocols a service manager offers a
// daemon: socket activation (sockets passed as descriptors 3.. with
// LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES) and readiness notification
// (datagrams such as "READY=1" sent to $NOTIFY_SOCKET, and the watchdog
// that WATCHDOG_USEC and WATCHDOG_PID ask for). Both are written here from
// sd_listen_fds(3) and sd_notify(3) rather than taken from a library: each
// is a few dozen lines, and the daemon needs nothing else of systemd.
//
// Neither needs systemd as PID 1: systemd-socket-activate(1) passes
// sockets the same way, and any process that reads a unix datagram socket
// can stand in for the notification socket (the tests do).
//
// Concurrency: ListenFiles reads and clears the environment, so call it
// once, early, before other goroutines read the environment. A Notifier is
// safe for concurrent use.
package systemd
