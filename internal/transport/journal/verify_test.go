package journal_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ipclab/logagg/internal/transport/journal"
	"github.com/ipclab/logagg/internal/transport/journal/journaltest"
)

// tearEnv names the line a tearing journalctl (this test binary, see
// TestMain) leaves out of its output; with tearAlwaysEnv set it does so
// when asked for one entry by cursor too, not only when following.
const tearEnv, tearAlwaysEnv = "LOGAGG_TEST_JOURNALCTL_DROP", "LOGAGG_TEST_JOURNALCTL_DROP_ALWAYS"

func TestMain(m *testing.M) {
	if line := os.Getenv(tearEnv); line != "" {
		os.Exit(tearingJournalctl(line))
	}
	os.Exit(m.Run())
}

// tearingJournalctl runs the real journalctl with this process's
// arguments and copies its output, without the line given (the way
// journalctl itself leaves out a field it read while the entry was being
// written): when following, or always with tearAlwaysEnv.
func tearingJournalctl(line string) int {
	runtime.LockOSThread() // Pdeathsig is the forking thread's
	cmd := exec.Command("journalctl", os.Args[1:]...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 1
	}
	if err := cmd.Start(); err != nil {
		return 1
	}
	drop := os.Getenv(tearAlwaysEnv) != "" || slices.Contains(os.Args[1:], "--follow")
	in, w := bufio.NewReader(out), bufio.NewWriter(os.Stdout)
	for {
		b, err := in.ReadSlice('\n')
		if !(drop && string(b) == line+"\n") {
			w.Write(b)
		}
		if in.Buffered() == 0 || err != nil {
			w.Flush()
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			break
		}
	}
	if cmd.Wait() != nil {
		return 1
	}
	return 0
}

// useTearingJournalctl makes the listeners the test opens run this test
// binary as journalctl, leaving line out.
func useTearingJournalctl(t *testing.T, line string, always bool) {
	t.Setenv(tearEnv, line)
	if always {
		t.Setenv(tearAlwaysEnv, "1")
	}
	old := journal.Command
	journal.Command = os.Args[0]
	t.Cleanup(func() { journal.Command = old })
}

// Every entry systemd-journal-remote wrote adds up to the hash in its
// cursor as journalctl exports it (text and binary values, every length
// around lookup3's 12-byte blocks, values large enough to be stored
// compressed, a field repeated with two values), and none does without
// one of its fields.
func TestEntriesAddUpToTheirCursor(t *testing.T) {
	journaltest.Require(t)
	dir := t.TempDir()
	var entries []journaltest.Entry
	for n := range 40 {
		entries = append(entries, journaltest.Entry{
			{"MESSAGE", strings.Repeat("m", n)}, {"F" + strings.Repeat("X", n%13), strings.Repeat("v", 40-n)},
			{"BIN", "a\x00b\nc" + strings.Repeat("\xff", n)}, {"_PID", "42"},
		})
	}
	entries = append(entries,
		journaltest.Entry{{"MESSAGE", strings.Repeat("compressible ", 1000)}},
		journaltest.Entry{{"MESSAGE", "two values"}, {"TAG", "one"}, {"TAG", "two"}},
	)
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Export(entries...))
	out, err := exec.Command("journalctl", "--directory="+dir, "--merge", "--output=export").Output()
	if err != nil {
		t.Fatal(err)
	}
	d := journal.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		e, err := d.Next()
		if err != nil {
			break
		}
		n++
		if !journal.Whole(e) {
			t.Errorf("entry %d does not add up to its cursor's hash: %s", n, fieldNames(e))
		}
		all := e.Fields
		for i, f := range all {
			if strings.HasPrefix(string(f.Name), "__") || string(f.Name) == "_BOOT_ID" {
				continue
			}
			e.Fields = slices.Concat(all[:i], all[i+1:])
			if journal.Whole(e) {
				t.Errorf("entry %d adds up without its field %s", n, f.Name)
			}
		}
	}
	if n != len(entries) {
		t.Fatalf("%d entries read, want %d", n, len(entries))
	}
}

func fieldNames(e *journal.Entry) string {
	var names []string
	for _, f := range e.Fields {
		names = append(names, string(f.Name))
	}
	return strings.Join(names, " ")
}

// An entry journalctl gives without a field while following is read
// again by its cursor. If that read is whole, the entry is written whole
// and counted as torn; if it reads the same (the journalctl that reads it
// again leaves the line out too), it is written as given and counted as
// unverified. The entries around it are written once each, whole.
func TestTornEntry(t *testing.T) {
	for _, c := range []struct {
		name             string
		tornAgain        bool
		message          any // entry 3's
		torn, unverified float64
	}{
		{"read_again_whole", false, "entry 3", 1, 0},
		{"read_again_the_same", true, nil, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			journaltest.Require(t)
			useTearingJournalctl(t, "MESSAGE=entry 3", c.tornAgain)
			dir := t.TempDir()
			journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Seq(0, 6))
			r := start(t, "journal://"+dir+"?from=start", t.TempDir())
			got := r.waitEntries(6)
			want(t, seqs(t, got), 0, 6)
			for i, m := range got {
				var msg any = "entry " + strconv.Itoa(i)
				if i == 3 {
					msg = c.message
				}
				if m["message"] != msg {
					t.Errorf("entry %d: message %v, want %v", i, m["message"], msg)
				}
			}
			if v := r.decodeErrors(journal.KindTorn); v != c.torn {
				t.Errorf("decode_errors_total{kind=journal_torn} = %v, want %v", v, c.torn)
			}
			if v := r.decodeErrors(journal.KindUnverified); v != c.unverified {
				t.Errorf("decode_errors_total{kind=journal_unverified} = %v, want %v", v, c.unverified)
			}
		})
	}
}

// An entry that gave one field twice with the same value (here through
// systemd-journal-remote) is kept with it once, and its cursor's hash
// counts it twice: it never adds up. It is written as it is, once, with
// its fields, counted as unverified.
func TestEntryWithARepeatedField(t *testing.T) {
	journaltest.Require(t)
	dir := t.TempDir()
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Export(
		journaltest.Entry{{"MESSAGE", "twice"}, {"TAG", "same"}, {"TAG", "same"}, {"SEQ", "0"}},
		journaltest.Entry{{"MESSAGE", "once"}, {"TAG", "same"}, {"SEQ", "1"}},
	))
	r := start(t, "journal://"+dir+"?from=start", t.TempDir())
	got := r.waitEntries(2)
	want(t, seqs(t, got), 0, 2)
	if m := got[0]; m["message"] != "twice" || m["journal"].(map[string]any)["TAG"] != "same" {
		t.Errorf("entry 0: %v", m)
	}
	if v := r.decodeErrors(journal.KindUnverified); v != 1 {
		t.Errorf("decode_errors_total{kind=journal_unverified} = %v, want 1", v)
	}
	if v := r.decodeErrors(journal.KindTorn); v != 0 {
		t.Errorf("decode_errors_total{kind=journal_torn} = %v, want 0", v)
	}
}
