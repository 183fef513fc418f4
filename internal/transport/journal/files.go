package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/jsonstr"
)

// watchEvery is how often the watcher looks at the journal's files (a
// variable for tests).
var watchEvery = 2 * time.Second

// fileState is what the watcher knows of one journal file.
type fileState struct {
	size int64
	// bad is the problem found with the file's header ("" for none);
	// reported once it is found twice at the same size (a file being
	// created is short for a moment).
	bad      string
	reported bool
}

// watch keeps input_files and input_rotations_total current, and checks
// the header of every journal file that appears or changes size. A file
// journalctl cannot read (truncated, not a journal file) it ignores,
// with a line on its standard error at start and silently when the file
// appears later, so the watcher reports it itself: counted in
// decode_errors_total{kind="journal_file"}, logged, and written as a
// notice record ({"event":"journal_error","cause":"file",...}), once per
// file and size.
func (l *Listener) watch(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	var n *noticeEmitter
	defer func() {
		if n != nil {
			n.release()
		}
	}()
	known := map[string]*fileState{}
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for first := true; ; first = false {
		for _, p := range l.scan(known, first) {
			st := known[p]
			if l.m != nil {
				l.m.DecodeError(KindFile, 1)
			}
			l.log.Warn("journal: a file journalctl cannot read", "file", p, "problem", st.bad)
			if n == nil {
				n = newNoticeEmitter(l.d.Sink, l.m, l.cfg.url)
			}
			n.emit("journal: "+p+": "+st.bad+"; journalctl skips it", "file",
				`"file":"`+jsonEscape(p)+`"`)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func jsonEscape(s string) string { return string(jsonstr.AppendEscapedString(nil, s)) }

// scan lists the journal files, updates the gauges and returns the files
// whose problem is now certain and not yet reported.
func (l *Listener) scan(known map[string]*fileState, first bool) (report []string) {
	seen := map[string]bool{}
	for _, dir := range l.journalDirs() {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, de := range ents {
			name := de.Name()
			if !de.Type().IsRegular() || !(strings.HasSuffix(name, ".journal") || strings.HasSuffix(name, ".journal~")) {
				continue
			}
			info, err := de.Info()
			if err != nil {
				continue
			}
			p := filepath.Join(dir, name)
			seen[p] = true
			st := known[p]
			if st == nil {
				st = &fileState{size: -1}
				known[p] = st
				// A rotation renames the active file and starts a new
				// one: one new name, as is a new boot's or user's file.
				if !first && l.m != nil && l.m.Rotations != nil {
					l.m.Rotations.Inc()
				}
			}
			if info.Size() == st.size && (st.bad == "" || st.reported) {
				continue
			}
			bad := checkHeader(p, info.Size())
			switch {
			case bad == "":
				st.bad, st.reported = "", false
			case bad == st.bad && info.Size() == st.size:
				st.reported = true
				report = append(report, p)
			default:
				st.bad, st.reported = bad, false
			}
			st.size = info.Size()
		}
	}
	for p := range known {
		if !seen[p] {
			delete(known, p)
		}
	}
	if l.m != nil && l.m.Files != nil {
		l.m.Files.Set(float64(len(known)))
	}
	return report
}

// journalDirs are the directories journalctl reads: the URL's directory
// and its machine-id subdirectories, or the system journal's
// (/var/log/journal/MACHINE-ID and /run/log/journal/MACHINE-ID).
func (l *Listener) journalDirs() []string {
	roots := []string{l.cfg.dir}
	if l.cfg.dir == "" {
		roots = []string{"/var/log/journal", "/run/log/journal"}
	}
	id := ""
	if l.cfg.dir == "" {
		if b, err := os.ReadFile("/etc/machine-id"); err == nil {
			id = strings.TrimSpace(string(b))
		}
	}
	var dirs []string
	for _, root := range roots {
		if l.cfg.dir != "" {
			dirs = append(dirs, root)
		}
		ents, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, de := range ents {
			if de.IsDir() && isID128(de.Name()) && (id == "" || de.Name() == id) {
				dirs = append(dirs, filepath.Join(root, de.Name()))
			}
		}
	}
	return dirs
}

func isID128(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// journalMagic starts every journal file ("LPKSHHRH").
var journalMagic = []byte("LPKSHHRH")

// checkHeader says what makes the journal file at p, of size bytes,
// unreadable to journalctl, or "": not a journal file, or shorter than its
// header says (journalctl: "is truncated, ignoring file"). The header's
// layout is systemd's (src/libsystemd/sd-journal/journal-def.h):
// header_size at byte 88, arena_size at 96, both little-endian.
func checkHeader(p string, size int64) string {
	f, err := os.Open(p)
	if err != nil {
		return "" // unreadable to us is not a verdict on the file
	}
	defer f.Close()
	var h [104]byte
	n, _ := f.ReadAt(h[:], 0)
	if n < len(journalMagic) || !bytes.Equal(h[:len(journalMagic)], journalMagic) {
		return fmt.Sprintf("not a journal file (%d bytes, no journal header)", size)
	}
	if n < len(h) {
		return fmt.Sprintf("truncated (%d bytes, shorter than a journal header)", size)
	}
	hs := binary.LittleEndian.Uint64(h[88:])
	arena := binary.LittleEndian.Uint64(h[96:])
	if want := hs + arena; hs < 8 || want < hs || want > uint64(size) {
		return fmt.Sprintf("truncated (%d bytes, its header says %d)", size, want)
	}
	return ""
}
