package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// ListenURL is the aggregator's listen URL for a transport (the
// producer's name for it) with its files in dir. TCP and UDP ask for port
// 0: Proc.Bound gives the port bound.
func ListenURL(transport, dir string) (string, error) {
	switch transport {
	case "unixsock", "unix":
		return "unix://" + filepath.Join(dir, "log.sock"), nil
	case "unixgram":
		return "unixgram://" + filepath.Join(dir, "log.dgram.sock"), nil
	case "tcp":
		return "tcp://127.0.0.1:0", nil
	case "udp":
		return "udp://127.0.0.1:0", nil
	case "fifo":
		return "fifo://" + filepath.Join(dir, "log_fifo"), nil
	case "shm":
		return "shm://" + filepath.Join(dir, "log.shm.sock"), nil
	case "mq":
		// POSIX queue names are global: the pid and the directory keep
		// concurrent runs apart.
		return "mq:///logagg-" + strconv.Itoa(os.Getpid()) + "-" + filepath.Base(dir), nil
	}
	return "", fmt.Errorf("unknown transport %q", transport)
}
