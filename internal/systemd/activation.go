package systemd

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// listenFDsStart is the first descriptor passed (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// File is one descriptor passed by the service manager, with its name:
// FileDescriptorName= of the socket unit, by default the unit's name
// ("logagg.socket" passes "logagg"), or "unknown" when none was given
// (systemd-socket-activate without --fdname).
type File struct {
	*os.File
	FD   int
	Name string
}

// ListenFiles returns the descriptors passed to this process for socket
// activation, in order, each marked close-on-exec, and unsets LISTEN_PID,
// LISTEN_FDS and LISTEN_FDNAMES so no child of ours takes them for its own.
// It returns nothing when LISTEN_PID names another process (the variables
// were inherited from a parent they were meant for) or is unset. A
// malformed LISTEN_FDS is an error.
func ListenFiles() ([]File, error) {
	pidStr, fdsStr, namesStr := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_FDNAMES")
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	if pidStr == "" || fdsStr == "" {
		return nil, nil
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil {
		return nil, fmt.Errorf("LISTEN_PID=%q is not a pid", pidStr)
	}
	if pid != os.Getpid() {
		return nil, nil
	}
	n, err := strconv.Atoi(fdsStr)
	if err != nil || n < 0 || n > 1<<16 {
		return nil, fmt.Errorf("LISTEN_FDS=%q is not a descriptor count", fdsStr)
	}
	var names []string
	if namesStr != "" {
		names = strings.Split(namesStr, ":")
	}
	files := make([]File, 0, n)
	for i := range n {
		fd := listenFDsStart + i
		name := "unknown"
		if i < len(names) && names[i] != "" {
			name = names[i]
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("LISTEN_FDS=%d but descriptor %d is not open: %w", n, fd, err)
		}
		unix.CloseOnExec(fd)
		files = append(files, File{File: os.NewFile(uintptr(fd), "LISTEN_FD_"+strconv.Itoa(fd)+":"+name), FD: fd, Name: name})
	}
	return files, nil
}

func closeFiles(files []File) {
	for _, f := range files {
		f.Close()
	}
}
