package main

// The journal input end to end: real journal files written by
// systemd-journal-remote, read by the real aggregator through its
// journalctl child.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport/journal/journaltest"
)

// journalSeqs counts the journal records in the output files by their
// SEQ field, and returns the other records (notices, other inputs).
func journalSeqs(t *testing.T, output string) (seqs map[int]int, recs []map[string]any, other []map[string]any) {
	t.Helper()
	seqs = map[int]int{}
	for _, m := range readRecords(t, output) {
		a := agg(m)
		j, _ := m["journal"].(map[string]any)
		s, ok := j["SEQ"].(string)
		if a["transport"] != "journal" || !ok {
			other = append(other, m)
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("SEQ %q", s)
		}
		seqs[n]++
		recs = append(recs, m)
	}
	return seqs, recs, other
}

// checkSeqRecord checks a record of journaltest.Seq entry n.
func checkSeqRecord(m map[string]any, n int) error {
	a := agg(m)
	peer, _ := a["peer"].(map[string]any)
	if m["message"] != "entry "+strconv.Itoa(n) || m["level"] != "info" || m["source"] != "app" ||
		peer["pid"] != 4242.0 || peer["uid"] != 1000.0 || peer["via"] != "journal" || a["format"] != "json" {
		return fmt.Errorf("record of entry %d: %v", n, m)
	}
	return nil
}

// TestJournalEndToEnd: entries already in the journal, appended while the
// aggregator follows, and in a new file, each once with its fields; a
// routing rule sees them as transport journal with their facility and
// severity (an rsyslog selector); the
// input's metrics are there.
func TestJournalEndToEnd(t *testing.T) {
	journaltest.Require(t)
	dir := testenv.ShortTempDir(t)
	jdir := filepath.Join(dir, "journal")
	os.Mkdir(jdir, 0o755)
	a := filepath.Join(jdir, "a.journal")
	journaltest.Write(t, a, journaltest.Export(journaltest.Entry{
		{"MESSAGE", "Failed password for root\n  from 10.0.0.1"}, {"PRIORITY", "3"}, {"SYSLOG_FACILITY", "10"},
		{"SYSLOG_IDENTIFIER", "sshd"}, {"_PID", "812"}, {"_UID", "0"}, {"_GID", "0"}, {"_HOSTNAME", "box"},
		{"_SYSTEMD_UNIT", "ssh.service"}, {"_COMM", "sshd"}, {"_EXE", "/usr/sbin/sshd"},
		{"CODE_FUNC", "auth_log"}, {"KEY", "\x01\x02binary\xff"},
	}))
	journaltest.Write(t, a, journaltest.Seq(0, 50))
	errs := filepath.Join(dir, "errors.jsonl")
	conf := filepath.Join(dir, "logagg.yaml")
	os.WriteFile(conf, []byte(fmt.Sprintf(`
outputs:
  errors: {path: %s, fsync: never}
rules:
  - {name: journal-errors, match: {transport: journal, selector: "auth,authpriv.err"}, route: [errors, default]}
`, errs)), 0o644)
	url := "journal://" + jdir + "?from=start"
	p := startAgg(t, dir, "--config", conf, "--listen", url)
	if got := p.url("journal"); got != url {
		t.Fatalf("listener URL %s, want %s", got, url)
	}
	p.waitMetric(51, "logagg_records_out_total")
	journaltest.Write(t, a, journaltest.Seq(50, 50))
	journaltest.Write(t, filepath.Join(jdir, "b.journal"), journaltest.Seq(100, 50))
	if got := p.waitMetric(151, "logagg_records_out_total"); got != 151 {
		t.Fatalf("%v records written, want 151\n%s", got, p.log())
	}
	if v := p.waitMetric(2, "logagg_input_files", `listener="`+url+`"`); v != 2 {
		t.Errorf("logagg_input_files %v, want 2", v)
	}
	if v := p.metric("logagg_rule_matched_total", `rule="journal-errors"`); v != 1 {
		t.Errorf("the rule matched %v journal records, want 1", v)
	}
	p.stop(syscall.SIGTERM)

	seqs, _, other := journalSeqs(t, p.output)
	for n := range 150 {
		if seqs[n] != 1 {
			t.Fatalf("entry %d written %d times", n, seqs[n])
		}
	}
	if len(other) != 1 {
		t.Fatalf("want the sshd entry besides the numbered ones, got %s", describe(other))
	}
	m := other[0]
	j := m["journal"].(map[string]any)
	peer := agg(m)["peer"].(map[string]any)
	sys := m["syslog"].(map[string]any)
	for _, c := range [][2]any{
		{m["message"], "Failed password for root\n  from 10.0.0.1"}, {m["level"], "err"}, {m["source"], "sshd"},
		{sys["facility"], 10.0}, {sys["hostname"], "box"}, {peer["pid"], 812.0}, {peer["uid"], 0.0}, {peer["via"], "journal"},
		{j["_SYSTEMD_UNIT"], "ssh.service"}, {j["_BOOT_ID"], journaltest.BootID}, {j["_EXE"], "/usr/sbin/sshd"},
		{j["CODE_FUNC"], "auth_log"}, {fmt.Sprint(j["KEY"]), "map[base64:AQJiaW5hcnn/]"}, {agg(m)["listener"], url},
	} {
		if fmt.Sprint(c[0]) != fmt.Sprint(c[1]) {
			t.Errorf("got %v, want %v in %v", c[0], c[1], m)
		}
	}
	routed := readRecords(t, errs)
	if len(routed) != 1 || routed[0]["source"] != "sshd" {
		t.Errorf("errors output: %s", describe(routed))
	}
}

// TestJournalKilled: SIGKILL three times while 100,000 entries are
// appended to the journal, restarting each time: every entry is in the
// output at least once, with its fields; the duplicates (entries read
// again after the last saved checkpoint) are counted.
func TestJournalKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	journaltest.Require(t)
	dir := testenv.ShortTempDir(t)
	jdir := filepath.Join(dir, "journal")
	os.Mkdir(jdir, 0o755)
	path := filepath.Join(jdir, "system.journal")
	const total, chunk = 100_000, 2_000
	args := []string{"--listen", "journal://" + jdir + "?from=start"}
	p := startAgg(t, dir, args...)

	wrote := make(chan error, 1)
	var appended int
	go func() {
		for n := 0; n < total; n += chunk {
			if err := journaltest.WriteErr(path, journaltest.Seq(n, chunk)); err != nil {
				wrote <- err
				return
			}
			appended = n + chunk
			time.Sleep(100 * time.Millisecond)
		}
		wrote <- nil
	}()
	const every = 10_000
	for k := range 3 {
		if got := p.waitMetric(every, "logagg_records_out_total"); got < every {
			t.Fatalf("kill %d: only %v records written\n%s", k+1, got, p.log())
		}
		p.signal(syscall.SIGKILL)
		<-p.exited()
		select {
		case err := <-wrote:
			wrote <- err
			t.Errorf("kill %d came after the journal was complete: not a kill while appending", k+1)
		default:
		}
		p = startAgg(t, dir, args...)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries appended", appended)
	// Everything is read once the last aggregator's checkpoint reaches the
	// end: poll the output for the last entries.
	testenv.Eventually(t, 60*time.Second, "every entry in the output", func() bool {
		return len(liveSeqs(p.output)) == total
	})
	// An entry journalctl caught half linked is read again whole (ADR
	// 0066); checkSeqRecord below sees that it was.
	t.Logf("last aggregator: %v entries read torn and read again whole, %v unverified",
		p.metric("logagg_decode_errors_total", `kind="journal_torn"`),
		p.metric("logagg_decode_errors_total", `kind="journal_unverified"`))
	p.stop(syscall.SIGTERM)

	seqs, recs, other := journalSeqs(t, p.output)
	dups := 0
	for n := range total {
		switch c := seqs[n]; {
		case c == 0:
			t.Fatalf("entry %d is missing (%d distinct of %d)", n, len(seqs), total)
		case c > 1:
			dups += c - 1
		}
	}
	for _, m := range recs {
		n, _ := strconv.Atoi(m["journal"].(map[string]any)["SEQ"].(string))
		if err := checkSeqRecord(m, n); err != nil {
			t.Fatal(err)
		}
	}
	if len(other) != 0 {
		t.Errorf("records that are not entries (a gap reported?): %s", describe(other))
	}
	t.Logf("%d records for %d entries: %d duplicates over 3 kills (entries after the last saved checkpoint, read again)",
		len(recs), total, dups)
}

// TestJournalBadFiles: a corrupt entry and a truncated file are counted
// and reported with their cause, the entries around them are written,
// and the aggregator goes on serving the journal and its other inputs.
func TestJournalBadFiles(t *testing.T) {
	journaltest.Require(t)
	dir := testenv.ShortTempDir(t)
	jdir := filepath.Join(dir, "journal")
	os.Mkdir(jdir, 0o755)
	journaltest.Write(t, filepath.Join(jdir, "a.journal"), journaltest.Seq(0, 100))
	journaltest.CorruptEntry(t, filepath.Join(jdir, "a.journal"), 50) // entry 49
	journaltest.Write(t, filepath.Join(jdir, "b.journal"), journaltest.Seq(100, 100))
	if err := os.Truncate(filepath.Join(jdir, "b.journal"), 100_000); err != nil {
		t.Fatal(err)
	}
	journaltest.Write(t, filepath.Join(jdir, "c.journal"), journaltest.Seq(200, 100))
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "journal://"+jdir+"?from=start", "--listen", "unix://"+sock)
	if v := p.waitMetric(1, "logagg_decode_errors_total", `kind="journal_gap"`); v != 1 {
		t.Errorf("journal_gap %v, want 1 (one entry)\n%s", v, p.log())
	}
	if v := p.waitMetric(1, "logagg_decode_errors_total", `kind="journal_file"`); v != 1 {
		t.Errorf("journal_file %v, want 1\n%s", v, p.log())
	}
	journaltest.Write(t, filepath.Join(jdir, "d.journal"), journaltest.Seq(300, 10))
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(c, "still serving")
	c.Close()
	p.waitMetric(199+10+2+1, "logagg_records_out_total") // entries, two notices, the line
	p.stop(syscall.SIGTERM)
	if !strings.Contains(p.log(), "entries missing") || !strings.Contains(p.log(), "b.journal") {
		t.Errorf("the log does not say what was wrong:\n%s", p.log())
	}

	seqs, _, other := journalSeqs(t, p.output)
	for n := range 310 {
		want := 1
		if n == 49 || (n >= 100 && n < 200) {
			want = 0
		}
		if seqs[n] != want {
			t.Errorf("entry %d written %d times, want %d", n, seqs[n], want)
		}
	}
	causes := map[string]string{}
	for _, m := range other {
		if m["event"] == "journal_error" {
			causes[m["cause"].(string)], _ = m["message"].(string)
		} else if m["message"] != "still serving" {
			t.Errorf("unexpected record %v", m)
		}
	}
	if !strings.Contains(causes["gap"], "1 entries missing") || !strings.Contains(causes["file"], "b.journal: truncated") {
		t.Errorf("notices %v", causes)
	}
}

// TestJournalReload: a journal listener added by SIGHUP reads, one
// removed stops (its journalctl with it) after saving its checkpoint, and
// added again resumes there.
func TestJournalReload(t *testing.T) {
	journaltest.Require(t)
	dir := testenv.ShortTempDir(t)
	jdir := filepath.Join(dir, "journal")
	os.Mkdir(jdir, 0o755)
	path := filepath.Join(jdir, "a.journal")
	journaltest.Write(t, path, journaltest.Seq(0, 10))
	sock, out := filepath.Join(dir, "s.sock"), filepath.Join(dir, "out.jsonl")
	cfgPath := filepath.Join(dir, "logagg.yaml")
	url := "journal://" + jdir + "?from=start"
	withJournal := fmt.Sprintf("listen: [\"unix://%s\", %q]\noutput: {path: %s, fsync: never}\n", sock, url, out)
	without := fmt.Sprintf("listen: [\"unix://%s\"]\noutput: {path: %s, fsync: never}\n", sock, out)
	os.WriteFile(cfgPath, []byte(without), 0o644)
	cmd, stderr, _ := startWithConfig(t, cfgPath)
	count := func() int { return len(liveSeqs(out)) }
	journalctls := func() int {
		n := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if strings.Contains(string(b), "--directory="+jdir+"\x00") {
				n++
			}
		}
		return n
	}

	os.WriteFile(cfgPath, []byte(withJournal), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 15*time.Second, func() bool { return count() == 10 }, stderr.String)
	os.WriteFile(cfgPath, []byte(without), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 15*time.Second, func() bool { return journalctls() == 0 }, func() string {
		return "journalctl still running after its listener was removed\n" + stderr.String()
	})
	journaltest.Write(t, path, journaltest.Seq(10, 5))
	time.Sleep(500 * time.Millisecond)
	if n := count(); n != 10 {
		t.Fatalf("%d entries written while the journal listener was removed, want 10", n)
	}
	os.WriteFile(cfgPath, []byte(withJournal), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 15*time.Second, func() bool { return count() == 15 }, stderr.String)
	seqs, _, _ := journalSeqs(t, out)
	for n := range 15 {
		if seqs[n] != 1 {
			t.Errorf("entry %d written %d times", n, seqs[n])
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
}

// liveSeqs counts the distinct journal entries in output while the
// aggregator may be writing it (a line being written is left out).
func liveSeqs(output string) map[int]bool {
	out := map[int]bool{}
	f, err := os.Open(output)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct {
			Journal struct{ SEQ string } `json:"journal"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Journal.SEQ != "" {
			n, _ := strconv.Atoi(m.Journal.SEQ)
			out[n] = true
		}
	}
	return out
}
