package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/journal"
	"github.com/ipclab/logagg/internal/transport/journal/journaltest"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// running is a journal listener under test, its records captured.
type running struct {
	t      *testing.T
	l      transport.Listener
	cap    *transporttest.Capture
	m      *metrics.Metrics
	cancel context.CancelFunc
	done   chan error
}

func open(t *testing.T, rawURL, stateDir string) (transport.Listener, *transporttest.Capture, *metrics.Metrics, error) {
	t.Helper()
	c := transporttest.NewCapture()
	m := metrics.New(nil)
	d := transport.Deps{Sink: sink.New(c, sink.Options{}), Root: m, Opts: transport.DefaultOptions(), StateDir: stateDir}
	l, err := transport.Open(rawURL, d)
	return l, c, m, err
}

// start opens rawURL with its checkpoint in stateDir and runs it.
func start(t *testing.T, rawURL, stateDir string) *running {
	t.Helper()
	l, c, m, err := open(t, rawURL, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, l: l, cap: c, m: m, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- l.Run(ctx) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop ends Run and waits for it.
func (r *running) stop() {
	r.t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("Run: %v", err)
		}
		r.done <- nil // stop is idempotent
	case <-time.After(10 * time.Second):
		r.t.Fatal("Run did not return within 10 s of its context ending")
	}
}

// records decodes what was captured, as generic JSON objects.
func (r *running) records() []map[string]any {
	r.t.Helper()
	recs, err := r.cap.Records()
	if err != nil {
		r.t.Fatal(err)
	}
	if errs := r.cap.Errors(); len(errs) > 0 {
		r.t.Fatalf("malformed batches: %v", errs)
	}
	out := make([]map[string]any, len(recs))
	for i, rec := range recs {
		if err := json.Unmarshal(rec.Raw, &out[i]); err != nil {
			r.t.Fatal(err)
		}
	}
	return out
}

// entries are the records that came from journal entries (not notices).
func (r *running) entries() []map[string]any {
	var out []map[string]any
	for _, m := range r.records() {
		if m["event"] == nil {
			out = append(out, m)
		}
	}
	return out
}

func (r *running) waitEntries(n int) []map[string]any {
	r.t.Helper()
	var got []map[string]any
	testenv.Eventually(r.t, 30*time.Second, fmt.Sprintf("%d journal records", n), func() bool {
		got = r.entries()
		return len(got) >= n
	})
	return got
}

func (r *running) decodeErrors(kind string) float64 {
	return testutil.ToFloat64(r.m.DecodeErrors.WithLabelValues(r.l.URL(), kind))
}

// seqs are the SEQ fields of records, in order.
func seqs(t *testing.T, recs []map[string]any) []int {
	t.Helper()
	var out []int
	for _, m := range recs {
		j, _ := m["journal"].(map[string]any)
		s, _ := j["SEQ"].(string)
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("record without SEQ: %v", m)
		}
		out = append(out, n)
	}
	return out
}

func want(t *testing.T, got []int, first, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("got %d entries, want %d: %v", len(got), n, clip(got))
	}
	for i, s := range got {
		if s != first+i {
			t.Fatalf("entry %d is SEQ %d, want %d: %v", i, s, first+i, clip(got))
		}
	}
}

func clip(s []int) []int {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}

func TestParseURL(t *testing.T) {
	journaltest.Require(t) // Open looks journalctl up
	dir := t.TempDir()
	cases := []struct{ in, url, err string }{
		{"journal://", "journal://", ""},
		{"journal:///", "journal://", ""},
		{"journal://" + dir + "/", "journal://" + dir, ""},
		{"journal://?from=start", "journal://?from=start", ""},
		{"journal://?from=end", "journal://", ""},
		{"journal://?unit=b.service&unit=a.service&match=PRIORITY=3", "journal://?match=PRIORITY%3D3&unit=a.service&unit=b.service", ""},
		{"journal://var/log/journal", "", "want journal://"},
		{"journal://?from=middle", "", "from must be"},
		{"journal://?match=lower=x", "", "want FIELD=VALUE"},
		{"journal://?match=NOVALUE", "", "want FIELD=VALUE"},
		{"journal://?unit=-x", "", "unit"},
		{"journal://?follow=1", "", "unknown parameter"},
		{"journal:///no/such/dir", "", "no such file"},
	}
	for _, c := range cases {
		l, _, _, err := open(t, c.in, t.TempDir())
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, transport.ErrBadAddress)):
			t.Errorf("%s: error %v, want ErrBadAddress saying %q", c.in, err, c.err)
		case err == nil && l.URL() != c.url:
			t.Errorf("%s: URL %s, want %s", c.in, l.URL(), c.url)
		}
		if l != nil {
			l.Close()
		}
	}
}

// TestFollow: entries already there (from=start), entries appended while
// the listener follows, and a new file in the directory, each once, in
// order; the checkpoint names the last one after the stop.
func TestFollow(t *testing.T) {
	journaltest.Require(t)
	dir, state := t.TempDir(), t.TempDir()
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Seq(0, 3))
	r := start(t, "journal://"+dir+"?from=start", state)
	want(t, seqs(t, r.waitEntries(3)), 0, 3)
	// The export decoder's buffer is counted with the read buffers while
	// journalctl runs, and given back with it.
	if n := r.m.Memory.Held(metrics.MemReadBuffers); n < 64<<10 {
		t.Errorf("read_buffers %d bytes while following, want the decoder's buffer (64 KiB at least)", n)
	}
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Seq(3, 2))
	want(t, seqs(t, r.waitEntries(5)), 0, 5)
	journaltest.Write(t, filepath.Join(dir, "b.journal"), journaltest.Seq(5, 2))
	want(t, seqs(t, r.waitEntries(7)), 0, 7)
	r.stop()
	want(t, seqs(t, r.entries()), 0, 7)
	if n := r.m.Memory.Held(metrics.MemReadBuffers); n != 0 {
		t.Errorf("read_buffers %d bytes after the input stopped, want 0", n)
	}
	cp := r.l.(*journal.Listener).CheckpointPath()
	b, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	last := r.entries()[6]["journal"].(map[string]any)["__CURSOR"].(string)
	if !strings.Contains(string(b), last) {
		t.Fatalf("checkpoint %s holds %s, want the last entry's cursor %s", cp, b, last)
	}
	if v := testutil.ToFloat64(r.m.RecordsIn.WithLabelValues(r.l.URL())); v != 7 {
		t.Fatalf("records_in_total %v, want 7", v)
	}

	// Started again: nothing twice, and what came meanwhile.
	journaltest.Write(t, filepath.Join(dir, "b.journal"), journaltest.Seq(7, 3))
	r2 := start(t, "journal://"+dir+"?from=start", state)
	want(t, seqs(t, r2.waitEntries(3)), 7, 3)
	time.Sleep(300 * time.Millisecond)
	want(t, seqs(t, r2.entries()), 7, 3)
}

// A large entry in a journal file that systemd-journal-remote wrote grows
// the decoder's buffer, and small entries after it give the buffer back:
// read_buffers, which follows it, returns to the 64 KiB it starts with.
// The count moves when an entry is decoded, so one more entry after the
// give-back shows it.
func TestLargeEntryBufferGivenBack(t *testing.T) {
	journaltest.Require(t)
	dir, state := t.TempDir(), t.TempDir()
	big := strings.Repeat("x", 200_000)
	path := filepath.Join(dir, "a.journal")
	journaltest.Write(t, path, journaltest.Export(journaltest.Entry{{"MESSAGE", big}, {"SEQ", "0"}}))
	r := start(t, "journal://"+dir+"?from=start", state)
	r.waitEntries(1)
	if n := r.m.Memory.Held(metrics.MemReadBuffers); n < 200_000 {
		t.Fatalf("read_buffers %d bytes after a 200 KB entry, want the decoder's buffer grown for it", n)
	}
	journaltest.Write(t, path, journaltest.Seq(1, 100))
	r.waitEntries(101)
	journaltest.Write(t, path, journaltest.Seq(101, 1))
	got := r.waitEntries(102)
	want(t, seqs(t, got), 0, 102)
	if m, _ := got[0]["message"].(string); m != big {
		t.Fatalf("the large entry's message has %d bytes, want %d", len(m), len(big))
	}
	if n := r.m.Memory.Held(metrics.MemReadBuffers); n != 64<<10 {
		t.Errorf("read_buffers %d bytes after 101 small entries, want the buffer given back (64 KiB)", n)
	}
}

// TestFromEnd: a first run without from=start reads only what comes
// after it started, also when it is stopped before anything came.
func TestFromEnd(t *testing.T) {
	journaltest.Require(t)
	dir, state := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "a.journal")
	journaltest.Write(t, path, journaltest.Seq(0, 5))
	r := start(t, "journal://"+dir, state)
	// The start is saved before anything is read.
	cp := r.l.(*journal.Listener).CheckpointPath()
	testenv.Eventually(t, 10*time.Second, "the checkpoint of the journal's end", func() bool {
		_, err := os.Stat(cp)
		return err == nil
	})
	r.stop()
	journaltest.Write(t, path, journaltest.Seq(5, 2))
	r = start(t, "journal://"+dir, state)
	want(t, seqs(t, r.waitEntries(2)), 5, 2)
	journaltest.Write(t, path, journaltest.Seq(7, 1))
	want(t, seqs(t, r.waitEntries(3)), 5, 3)
}

// TestFieldMapping: each field where docs/records.md says it goes.
func TestFieldMapping(t *testing.T) {
	journaltest.Require(t)
	dir := t.TempDir()
	const src = 1795382047421931
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Export(journaltest.Entry{
		{"MESSAGE", "first line\nsecond line"},
		{"PRIORITY", "3"},
		{"SYSLOG_FACILITY", "4"},
		{"SYSLOG_IDENTIFIER", "sshd"},
		{"SYSLOG_PID", "812"},
		{"_HOSTNAME", "box"},
		{"_PID", "812"},
		{"_UID", "0"},
		{"_GID", "0"},
		{"_COMM", "sshd"},
		{"_EXE", "/usr/sbin/sshd"},
		{"_SYSTEMD_UNIT", "ssh.service"},
		{"_SOURCE_REALTIME_TIMESTAMP", strconv.Itoa(src)},
		{"CODE_FILE", "auth.c"},
		{"CODE_LINE", "42"},
		{"BLOB", "\x00\x01\xfe\xff"},
		{"TAG", "a"},
		{"TAG", "b"},
	}, journaltest.Entry{
		{"MESSAGE", "bad \xff byte"},
		{"PRIORITY", "high"},
		{"_PID", "x"},
		{"_UID", "0"},
		{"_GID", "0"},
		{"_COMM", "thing"},
	}))
	r := start(t, "journal://"+dir+"?from=start", t.TempDir())
	recs := r.waitEntries(2)
	m := recs[0]
	j := m["journal"].(map[string]any)
	a := m["agg"].(map[string]any)
	peer, _ := a["peer"].(map[string]any)
	sys, _ := m["syslog"].(map[string]any)
	checks := []struct {
		what string
		got  any
		want any
	}{
		{"message", m["message"], "first line\nsecond line"},
		{"level", m["level"], "err"},
		{"source", m["source"], "sshd"},
		{"timestamp", m["timestamp"], time.UnixMicro(src).UTC().Format(time.RFC3339Nano)},
		{"syslog.facility", sys["facility"], 4.0},
		{"syslog.severity", sys["severity"], 3.0},
		{"syslog.hostname", sys["hostname"], "box"},
		{"syslog.appname", sys["appname"], "sshd"},
		{"syslog.procid", sys["procid"], "812"},
		{"agg.transport", a["transport"], "journal"},
		{"agg.listener", a["listener"], "journal://" + dir + "?from=start"},
		{"agg.peer.pid", peer["pid"], 812.0},
		{"agg.peer.uid", peer["uid"], 0.0},
		{"agg.peer.gid", peer["gid"], 0.0},
		{"agg.peer.via", peer["via"], "journal"},
		{"agg.format", a["format"], "json"},
		{"journal._SYSTEMD_UNIT", j["_SYSTEMD_UNIT"], "ssh.service"},
		{"journal._BOOT_ID", j["_BOOT_ID"], journaltest.BootID},
		{"journal._COMM", j["_COMM"], "sshd"},
		{"journal._EXE", j["_EXE"], "/usr/sbin/sshd"},
		{"journal.CODE_FILE", j["CODE_FILE"], "auth.c"},
		{"journal.CODE_LINE", j["CODE_LINE"], "42"},
		{"journal.BLOB", fmt.Sprint(j["BLOB"]), "map[base64:AAH+/w==]"},
		{"journal.TAG", fmt.Sprint(j["TAG"]), "[a b]"},
		{"journal.MESSAGE (mapped)", j["MESSAGE"], nil},
		{"journal._PID (in agg.peer)", j["_PID"], nil},
		{"journal.PRIORITY (mapped)", j["PRIORITY"], nil},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	for _, k := range []string{"__CURSOR", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_SOURCE_REALTIME_TIMESTAMP"} {
		if _, ok := j[k].(string); !ok {
			t.Errorf("journal.%s missing: %v", k, j)
		}
	}
	if flags := a["flags"]; flags != nil {
		t.Errorf("flags %v on a clean entry", flags)
	}
	// What does not map exactly stays in "journal" as it was.
	m = recs[1]
	j = m["journal"].(map[string]any)
	a = m["agg"].(map[string]any)
	if m["message"] != "bad \ufffd byte" || fmt.Sprint(j["MESSAGE"]) != "map[base64:YmFkIP8gYnl0ZQ==]" ||
		fmt.Sprint(a["flags"]) != "[invalid_utf8]" {
		t.Errorf("invalid UTF-8 message: %v", m)
	}
	if m["level"] != nil || j["PRIORITY"] != "high" || a["peer"] != nil || j["_PID"] != "x" || j["_UID"] != "0" || m["source"] != "thing" {
		t.Errorf("fields that do not map exactly: %v", m)
	}
}

// TestMatches: ?unit= and ?match= select what journalctl --unit and its
// matches select.
func TestMatches(t *testing.T) {
	journaltest.Require(t)
	dir := t.TempDir()
	var entries []journaltest.Entry
	for i := range 6 {
		unit := []string{"a.service", "b.service"}[i%2]
		entries = append(entries, journaltest.Entry{{"MESSAGE", "m" + strconv.Itoa(i)}, {"SEQ", strconv.Itoa(i)},
			{"_SYSTEMD_UNIT", unit}, {"PRIORITY", strconv.Itoa(3 + i%3*3)}})
	}
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Export(entries...))
	for _, c := range []struct {
		query string
		want  string
	}{
		{"unit=a.service", "[0 2 4]"},
		{"match=_SYSTEMD_UNIT=b.service", "[1 3 5]"},
		{"match=PRIORITY=3", "[0 3]"},
		{"match=PRIORITY=3&match=PRIORITY=6", "[0 1 3 4]"},        // one field: any value
		{"unit=a.service&match=PRIORITY=6", "[4]"},                // unit and match: both
		{"match=_SYSTEMD_UNIT=b.service&match=PRIORITY=9", "[5]"}, // two fields: both
	} {
		r := start(t, "journal://"+dir+"?from=start&"+c.query, t.TempDir())
		n := strings.Count(c.want, " ") + 1
		r.waitEntries(n)
		time.Sleep(200 * time.Millisecond)
		got := seqs(t, r.entries())
		r.stop()
		if fmt.Sprint(got) != c.want {
			t.Errorf("%s: %v, want %s", c.query, got, c.want)
		}
	}
}

// TestSecondInstance: one listener per journal and state directory; the
// second is refused naming the holder and the first goes on.
func TestSecondInstance(t *testing.T) {
	journaltest.Require(t)
	dir, state := t.TempDir(), t.TempDir()
	r := start(t, "journal://"+dir+"?from=start", state)
	if _, _, _, err := open(t, "journal://"+dir+"?from=start", state); !errors.Is(err, transport.ErrInUse) {
		t.Fatalf("second Open: %v, want ErrInUse", err)
	}
	// from= does not name a different input: the same checkpoint.
	if _, _, _, err := open(t, "journal://"+dir, state); !errors.Is(err, transport.ErrInUse) {
		t.Fatalf("second Open with another from=: %v, want ErrInUse", err)
	}
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Seq(0, 2))
	want(t, seqs(t, r.waitEntries(2)), 0, 2)
}

func TestBadCheckpoint(t *testing.T) {
	journaltest.Require(t)
	dir, state := t.TempDir(), t.TempDir()
	l, _, _, err := open(t, "journal://"+dir, state)
	if err != nil {
		t.Fatal(err)
	}
	cp := l.(*journal.Listener).CheckpointPath()
	l.Close()
	for _, body := range []string{"{", `{"version":1,"cursor":""}`, `{"version":2,"cursor":"s=1"}`, `{"version":1,"cursor":"a b"}`} {
		if err := os.WriteFile(cp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := open(t, "journal://"+dir, state); !errors.Is(err, journal.ErrBadCheckpoint) {
			t.Errorf("checkpoint %q: %v, want ErrBadCheckpoint", body, err)
		}
	}
}

// journalctlPIDs are the journalctl processes reading dir.
func journalctlPIDs(t *testing.T, dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) == "journalctl" && strings.Contains(string(b), "--directory="+dir+"\x00") &&
			strings.Contains(string(b), "--follow") {
			out = append(out, pid)
		}
	}
	return out
}

// TestJournalctlDies: journalctl killed is started again after the last
// entry read, nothing lost or repeated; and it does not outlive Run.
func TestJournalctlDies(t *testing.T) {
	journaltest.Require(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "a.journal")
	journaltest.Write(t, path, journaltest.Seq(0, 3))
	r := start(t, "journal://"+dir+"?from=start", t.TempDir())
	r.waitEntries(3)
	for k := range 3 {
		pids := journalctlPIDs(t, dir)
		if len(pids) != 1 {
			t.Fatalf("journalctl processes for %s: %v, want one", dir, pids)
		}
		syscall.Kill(pids[0], syscall.SIGKILL)
		journaltest.Write(t, path, journaltest.Seq(3+2*k, 2))
		want(t, seqs(t, r.waitEntries(5+2*k)), 0, 5+2*k)
	}
	r.stop()
	testenv.Eventually(t, 5*time.Second, "journalctl gone after Run returned", func() bool {
		return len(journalctlPIDs(t, dir)) == 0
	})
}

// TestTruncatedFile: a truncated journal file between good ones is
// counted, logged and reported as a record with its cause; the entries
// of the others are all there, and the listener goes on.
func TestTruncatedFile(t *testing.T) {
	journaltest.Require(t)
	defer journal.SetWatchEvery(100 * time.Millisecond)()
	dir := t.TempDir()
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Seq(0, 100))
	journaltest.Write(t, filepath.Join(dir, "b.journal"), journaltest.Seq(100, 100))
	journaltest.Write(t, filepath.Join(dir, "c.journal"), journaltest.Seq(200, 100))
	if err := os.Truncate(filepath.Join(dir, "b.journal"), 100_000); err != nil {
		t.Fatal(err)
	}
	r := start(t, "journal://"+dir+"?from=start", t.TempDir())
	got := seqs(t, r.waitEntries(200))
	want(t, got[:100], 0, 100)
	want(t, got[100:], 200, 100)
	var notice map[string]any
	testenv.Eventually(t, 10*time.Second, "a notice about b.journal", func() bool {
		for _, m := range r.records() {
			if m["event"] == "journal_error" && m["cause"] == "file" {
				notice = m
				return true
			}
		}
		return false
	})
	if !strings.Contains(notice["message"].(string), "b.journal: truncated") || notice["file"] != filepath.Join(dir, "b.journal") {
		t.Fatalf("notice %v", notice)
	}
	if v := r.decodeErrors(journal.KindFile); v != 1 {
		t.Fatalf("decode_errors_total{kind=journal_file} = %v, want 1", v)
	}
	journaltest.Write(t, filepath.Join(dir, "d.journal"), journaltest.Seq(300, 5))
	want(t, seqs(t, r.waitEntries(205))[200:], 300, 5)
	if v := r.decodeErrors(journal.KindFile); v != 1 {
		t.Fatalf("decode_errors_total{kind=journal_file} = %v after more files, want 1", v)
	}
}

// TestCorruptEntry: an entry the journal cannot give is counted as a gap
// in its sequence numbers and reported with its cause; the entries around
// it are kept.
func TestCorruptEntry(t *testing.T) {
	journaltest.Require(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "a.journal")
	journaltest.Write(t, path, journaltest.Seq(0, 100))
	journaltest.CorruptEntry(t, path, 50) // SEQ 49
	r := start(t, "journal://"+dir+"?from=start", t.TempDir())
	got := seqs(t, r.waitEntries(99))
	want(t, got[:49], 0, 49)
	want(t, got[49:], 50, 50)
	var notice map[string]any
	for _, m := range r.records() {
		if m["event"] == "journal_error" {
			notice = m
		}
	}
	if notice == nil || notice["cause"] != "gap" || notice["missing"] != 1.0 || !strings.Contains(notice["message"].(string), "1 entries missing") {
		t.Fatalf("notice %v", notice)
	}
	if v := r.decodeErrors(journal.KindGap); v != 1 {
		t.Fatalf("decode_errors_total{kind=journal_gap} = %v, want 1", v)
	}
}

// TestCheckpointOnlyWhenWritten: while the output does not take the
// records (the queue is full), the checkpoint does not move past what
// was written; once it takes them, it does.
func TestCheckpointOnlyWhenWritten(t *testing.T) {
	journaltest.Require(t)
	dir, state := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "a.journal")
	journaltest.Write(t, path, journaltest.Seq(0, 2))
	r := start(t, "journal://"+dir+"?from=start", state)
	recs := r.waitEntries(2)
	cp := r.l.(*journal.Listener).CheckpointPath()
	cursorOf := func(m map[string]any) string { return m["journal"].(map[string]any)["__CURSOR"].(string) }
	saved := func() string {
		b, _ := os.ReadFile(cp)
		var c struct{ Cursor string }
		json.Unmarshal(b, &c)
		return c.Cursor
	}
	testenv.Eventually(t, 10*time.Second, "the checkpoint at entry 1", func() bool { return saved() == cursorOf(recs[1]) })
	r.cap.Block()
	journaltest.Write(t, path, journaltest.Seq(2, 3))
	testenv.Eventually(t, 10*time.Second, "the listener blocked", func() bool { return r.cap.Waiting() > 0 })
	time.Sleep(2500 * time.Millisecond) // two saves' worth
	if got := saved(); got != cursorOf(recs[1]) {
		t.Fatalf("the checkpoint moved to %s while the records were not written", got)
	}
	r.cap.Unblock()
	recs = r.waitEntries(5)
	testenv.Eventually(t, 10*time.Second, "the checkpoint at entry 4", func() bool { return saved() == cursorOf(recs[4]) })
}

// TestAcrossBoots: what a boot wrote after the checkpoint is read after
// a reboot, before the next boot's entries (journalctl --follow alone
// would read only the last boot, see args).
func TestAcrossBoots(t *testing.T) {
	journaltest.Require(t)
	dir, state := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "a.journal")
	boot := func(id string, first, n int) []byte {
		var es []journaltest.Entry
		for i := first; i < first+n; i++ {
			es = append(es, journaltest.Entry{{"_BOOT_ID", id}, {"MESSAGE", "m"}, {"SEQ", strconv.Itoa(i)}})
		}
		return journaltest.Export(es...)
	}
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	journaltest.Write(t, path, boot(a, 0, 5))
	r := start(t, "journal://"+dir+"?from=start", state)
	want(t, seqs(t, r.waitEntries(5)), 0, 5)
	r.stop()
	journaltest.Write(t, path, boot(a, 5, 2))
	journaltest.Write(t, path, boot(b, 7, 3))
	r = start(t, "journal://"+dir+"?from=start", state)
	want(t, seqs(t, r.waitEntries(5)), 5, 5)
}

// TestInterleavedSequences: entries of two journal sequences (two files
// written independently) come interleaved in time; switching between
// them is no gap.
func TestInterleavedSequences(t *testing.T) {
	journaltest.Require(t)
	dir := t.TempDir()
	base := time.Now().UnixMicro()
	file := func(name string, parity int) {
		var es []journaltest.Entry
		for i := parity; i < 40; i += 2 {
			es = append(es, journaltest.Entry{{"__REALTIME_TIMESTAMP", strconv.FormatInt(base+int64(i), 10)},
				{"__MONOTONIC_TIMESTAMP", strconv.Itoa(1000 + i)}, {"MESSAGE", "m"}, {"SEQ", strconv.Itoa(i)}})
		}
		journaltest.Write(t, filepath.Join(dir, name), journaltest.Export(es...))
	}
	file("a.journal", 0)
	file("b.journal", 1)
	r := start(t, "journal://"+dir+"?from=start", t.TempDir())
	want(t, seqs(t, r.waitEntries(40)), 0, 40)
	r.stop()
	if v := r.decodeErrors(journal.KindGap); v != 0 || len(r.records()) != 40 {
		t.Fatalf("journal_gap %v, %d records for 40 entries", v, len(r.records()))
	}
}

// TestCheckpointNotSaved: a state directory that cannot be written is
// said in the log, not every second, and the input goes on reading.
func TestCheckpointNotSaved(t *testing.T) {
	journaltest.Require(t)
	dir, state := t.TempDir(), t.TempDir()
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Seq(0, 2))
	r := start(t, "journal://"+dir+"?from=start", state)
	cp := r.l.(*journal.Listener).CheckpointPath()
	// A directory where the temporary file goes makes every save fail.
	if err := os.Mkdir(cp+".tmp", 0o700); err != nil {
		t.Fatal(err)
	}
	want(t, seqs(t, r.waitEntries(2)), 0, 2)
	journaltest.Write(t, filepath.Join(dir, "a.journal"), journaltest.Seq(2, 2))
	want(t, seqs(t, r.waitEntries(4)), 0, 4)
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(cp); err == nil {
		t.Fatalf("a checkpoint was saved through a directory in the way")
	}
}
