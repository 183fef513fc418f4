// Package journaltest writes real journal files for tests, with
// systemd-journal-remote (Debian's package of that name), which appends
// entries given in the journal export format to a journal file; journalctl
// --directory reads them back. No journald is needed.
package journaltest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// RemotePath is where Debian installs systemd-journal-remote.
const RemotePath = "/lib/systemd/systemd-journal-remote"

// Require skips the test (or fails it in CI) unless systemd-journal-remote
// and journalctl are installed.
func Require(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(RemotePath); err != nil {
		testenv.SkipOrFail(t, "systemd-journal-remote not installed (scripts/setup.sh installs it)")
	}
	testenv.RequireCommand(t, "journalctl")
}

// Entry is an entry's fields, in order: {name, value} each. Fields named
// __REALTIME_TIMESTAMP, __MONOTONIC_TIMESTAMP and _BOOT_ID are added by
// Export when missing.
type Entry [][2]string

// BootID is the boot id of the entries Export completes.
const BootID = "0123456789abcdef0123456789abcdef"

// clock makes every entry's realtime timestamp later than the last one's
// in this process: journalctl merges files in time order, and follows
// forward from where it is.
var clock atomic.Int64

func init() { clock.Store(time.Now().UnixMicro()) }

// AppendExport appends e in the export format: NAME=value, or for a value
// holding a newline or a byte that is not printable text, NAME, its length
// as a 64-bit little-endian number, the bytes and a newline; a blank line
// ends the entry.
func AppendExport(b []byte, e Entry) []byte {
	has := map[string]bool{}
	for _, f := range e {
		has[f[0]] = true
	}
	if !has["__REALTIME_TIMESTAMP"] {
		t := clock.Add(1)
		b = append(b, "__REALTIME_TIMESTAMP="...)
		b = strconv.AppendInt(b, t, 10)
		b = append(b, "\n__MONOTONIC_TIMESTAMP="...)
		b = strconv.AppendInt(b, t%1_000_000_000_000, 10)
		b = append(b, '\n')
	}
	if !has["_BOOT_ID"] {
		b = append(b, "_BOOT_ID="+BootID+"\n"...)
	}
	for _, f := range e {
		b = AppendField(b, f[0], f[1])
	}
	return append(b, '\n')
}

// AppendField appends one field in the export format.
func AppendField(b []byte, name, value string) []byte {
	b = append(b, name...)
	if !binaryValue(value) {
		b = append(b, '=')
		b = append(b, value...)
		return append(b, '\n')
	}
	b = append(b, '\n')
	b = binary.LittleEndian.AppendUint64(b, uint64(len(value)))
	b = append(b, value...)
	return append(b, '\n')
}

func binaryValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f {
			return true
		}
	}
	return false
}

// Export renders entries in the export format.
func Export(entries ...Entry) []byte {
	var b []byte
	for _, e := range entries {
		b = AppendExport(b, e)
	}
	return b
}

// Seq renders n small entries numbered first..first+n-1 in the export
// format, fast (100,000 in a few milliseconds): MESSAGE "entry N", SEQ=N,
// PRIORITY 6, SYSLOG_IDENTIFIER app, and _PID, _UID, _GID.
func Seq(first, n int) []byte {
	b := make([]byte, 0, n*200)
	t := clock.Add(int64(n)) - int64(n)
	for i := first; i < first+n; i++ {
		t++
		b = append(b, "__REALTIME_TIMESTAMP="...)
		b = strconv.AppendInt(b, t, 10)
		b = append(b, "\n__MONOTONIC_TIMESTAMP="...)
		b = strconv.AppendInt(b, t%1_000_000_000_000, 10)
		b = append(b, "\n_BOOT_ID="+BootID+"\nMESSAGE=entry "...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, "\nSEQ="...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, "\nPRIORITY=6\nSYSLOG_IDENTIFIER=app\n_PID=4242\n_UID=1000\n_GID=1000\n\n"...)
	}
	return b
}

// Write appends export-format data to the journal file at path, created
// if missing, with systemd-journal-remote. It may rotate the file (a
// full one is renamed path@….journal, a new one started).
func Write(t testing.TB, path string, export []byte) {
	t.Helper()
	if err := WriteErr(path, export); err != nil {
		t.Fatal(err)
	}
}

// WriteErr is Write returning the error (for goroutines).
func WriteErr(path string, export []byte) error {
	cmd := exec.Command(RemotePath, "--output="+path, "-")
	cmd.Stdin = bytes.NewReader(export)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("systemd-journal-remote -o %s: %w\n%s", path, err, stderr.String())
	}
	// It says "Finishing after writing N entries"; anything about a
	// failed entry is an error in the test's data.
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "Failed") || strings.Contains(line, "failed") {
			return fmt.Errorf("systemd-journal-remote -o %s: %s", path, line)
		}
	}
	return nil
}

// CorruptEntry makes the k-th entry object (from 1) of the journal file
// at path unreadable: its realtime timestamp becomes 0, which journalctl
// rejects (the entry is skipped, the others read). The file format is
// systemd's journal-def.h: header_size at byte 88, tail_object_offset at
// 136; objects of {type u8, flags u8, reserved [6]u8, size u64, …},
// 8-byte aligned; an entry (type 3) has seqnum then realtime.
func CorruptEntry(t *testing.T, path string, k int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := binary.LittleEndian.Uint64(b[88:])
	tail := binary.LittleEndian.Uint64(b[136:])
	for n := 0; off <= tail && off+16 <= uint64(len(b)); {
		size := binary.LittleEndian.Uint64(b[off+8:])
		if size == 0 {
			break
		}
		if b[off] == 3 {
			if n++; n == k {
				binary.LittleEndian.PutUint64(b[off+24:], 0)
				if err := os.WriteFile(path, b, 0o640); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		off += (size + 7) &^ 7
	}
	t.Fatalf("%s has fewer than %d entries", path, k)
}
