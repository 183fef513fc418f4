package daemon

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
)

// How often trimCode looks at the resident code, and by how much it must
// have grown since the last drop for another.
const (
	codeCheck = 5 * time.Second
	codeSlack = 1 << 20
)

// trimCode drops the executable's resident pages at once (start-up is
// over), then again whenever they grew by more than codeSlack, and returns
// the free heap to the OS once the daemon is idle, until ctx ends. A metrics scrape maps about 5 MiB of the executable again (net/http,
// the collectors, and with fault-around each page touched brings its
// 64 KiB window), which serving records does not need; what the daemon
// runs all the time is mapped again within microseconds of a drop.
func (d *Daemon) trimCode(ctx context.Context) {
	drop := func() int64 {
		if n, err := dropCodePages(); err != nil {
			d.log.Warn("could not release resident code pages", "err", err)
		} else {
			d.log.Debug("released resident code pages", "bytes", n)
		}
		return metrics.ProcessRSS()["rss_file"]
	}
	base := drop()
	t := time.NewTicker(codeCheck)
	defer t.Stop()
	written, anon := d.Written(), int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rss := metrics.ProcessRSS()
		// Idle since the last look, and the heap grew (metrics scrapes, a
		// burst gone by): collect and give the free heap back to the OS
		// (a collection of an idle daemon's few MiB takes a millisecond).
		// While records flow the collector and its scavenger do it.
		if w := d.Written(); w != written {
			written, anon = w, 0
		} else if anon == 0 || rss["rss_anon"] > anon+codeSlack {
			debug.FreeOSMemory()
			anon = metrics.ProcessRSS()["rss_anon"]
		}
		if rss["rss_file"] > base+codeSlack {
			base = drop()
		}
	}
}

// dropCodePages gives back the resident pages of the executable's code and
// read-only data, and returns how many bytes were resident before.
//
// Start-up touches most of the 22 MB executable: package initialisation
// runs code of nearly every package linked in (Kafka, protobuf, TLS,
// YAML...) and the kernel maps whole 64 KiB windows around each page
// touched (fault-around), so about 12 MiB of it was resident and stayed
// so, two thirds of the idle daemon's RSS. Serving needs a fraction of
// it. madvise(MADV_DONTNEED) unmaps the pages from this process only: they
// stay in the page cache, and what the daemon runs later is mapped again
// from there at the next touch. Only mappings that hold no private copy
// of a page (smaps' Anonymous: 0) are dropped, so nothing that was
// written is lost.
func dropCodePages() (int64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	type mapping struct {
		start, end uintptr
		rss        int64
		anon       int64
	}
	var maps []mapping
	var cur *mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		fields := bytes.Fields(line)
		if len(fields) >= 5 && bytes.IndexByte(fields[0], '-') > 0 && !bytes.HasSuffix(fields[0], []byte(":")) {
			cur = nil
			// start-end perms offset dev inode [path]
			perms := fields[1]
			if len(fields) < 6 || string(fields[5]) != exe || perms[1] == 'w' || perms[3] != 'p' {
				continue
			}
			addr := bytes.SplitN(fields[0], []byte("-"), 2)
			start, err1 := strconv.ParseUint(string(addr[0]), 16, 64)
			end, err2 := strconv.ParseUint(string(addr[1]), 16, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			maps = append(maps, mapping{start: uintptr(start), end: uintptr(end)})
			cur = &maps[len(maps)-1]
			continue
		}
		if cur == nil || len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(string(fields[1]), 10, 64)
		if err != nil {
			continue
		}
		switch string(fields[0]) {
		case "Rss:":
			cur.rss = kb << 10
		case "Anonymous:":
			cur.anon = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	var dropped int64
	for _, m := range maps {
		if m.anon != 0 || m.rss == 0 {
			continue
		}
		// The mapping is the executable's own, read-only and never
		// copied (an address range, not Go memory: no unsafe.Pointer).
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); e != 0 {
			return dropped, e
		}
		dropped += m.rss
	}
	return dropped, nil
}
