package main

// The migration from rsyslog, proven: Debian 12's default rules run in
// rsyslog and, as contrib/examples/debian-rsyslog.yaml, in the aggregator;
// one corpus (every facility × every severity, from util-linux logger,
// Python's SysLogHandler and Go's log/syslog) goes to both as the same
// bytes, and every file must hold the same messages in both.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/syslog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// debianFiles are the files of Debian's rules, by the name of the output
// that writes them in the example ("default" is /var/log/syslog).
var debianFiles = []string{"syslog", "auth.log", "cron.log", "kern.log", "mail.log", "user.log"}

// rsyslogDebianConf is Debian 12's rules with the files under dir, read
// from the imuxsock socket sock, each line "FACILITY.SEVERITY MSG".
func rsyslogDebianConf(dir, sock string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global(workDirectory=%q)\n", dir)
	b.WriteString("module(load=\"imuxsock\" SysSock.Use=\"off\")\n")
	fmt.Fprintf(&b, "input(type=\"imuxsock\" Socket=%q RateLimit.Interval=\"0\")\n", sock)
	b.WriteString("template(name=\"facsev\" type=\"string\" string=\"%syslogfacility%.%syslogseverity% %msg%\\n\")\n")
	for _, rule := range [][2]string{
		{"*.*;auth,authpriv.none", "syslog"},
		{"auth,authpriv.*", "auth.log"},
		{"cron.*", "cron.log"},
		{"kern.*", "kern.log"},
		{"mail.*", "mail.log"},
		{"user.*", "user.log"},
	} {
		fmt.Fprintf(&b, "%s action(type=\"omfile\" file=%q template=\"facsev\")\n", rule[0], filepath.Join(dir, rule[1]))
	}
	return b.String()
}

// debianCorpus is one message per facility and severity and client.
type facsevMsg struct {
	fac, sev int
	text     string
}

func debianCorpus(client string) []facsevMsg {
	var out []facsevMsg
	for fac := 0; fac < 24; fac++ {
		for sev := 0; sev < 8; sev++ {
			out = append(out, facsevMsg{fac, sev, fmt.Sprintf("debian %s fac %d sev %d", client, fac, sev)})
		}
	}
	return out
}

// loggerFacilities are the facility names util-linux logger knows (it
// sends kern as user, as syslog(3) does).
var loggerFacilities = map[int]string{0: "kern", 1: "user", 2: "mail", 3: "daemon", 4: "auth", 5: "syslog", 6: "lpr", 7: "news",
	8: "uucp", 9: "cron", 10: "authpriv", 11: "ftp", 16: "local0", 17: "local1", 18: "local2", 19: "local3", 20: "local4",
	21: "local5", 22: "local6", 23: "local7"}

// sendDebianCorpus sends the whole corpus to the unix datagram socket sock
// with each client.
func sendDebianCorpus(t *testing.T, sock string) {
	t.Helper()
	for _, m := range debianCorpus("logger") {
		name, ok := loggerFacilities[m.fac]
		if !ok {
			continue
		}
		out, err := exec.Command("logger", "-u", sock, "-p", name+"."+severityKeywords[m.sev], "-t", "lgapp", "--", m.text).CombinedOutput()
		if err != nil {
			t.Fatalf("logger: %v\n%s", err, out)
		}
	}
	var triples [][3]any
	for _, m := range debianCorpus("python") {
		triples = append(triples, [3]any{m.fac, m.sev, m.text})
	}
	in, _ := json.Marshal(triples)
	cmd := exec.Command("python3", filepath.Join("testdata", "clients", "pyfacsev.py"), sock)
	cmd.Stdin = bytes.NewReader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pyfacsev.py: %v\n%s", err, out)
	}
	for _, m := range debianCorpus("go") {
		w, err := syslog.Dial("unixgram", sock, syslog.Priority(m.fac<<3|m.sev), "goapp")
		if err != nil {
			t.Fatal(err)
		}
		// Write sends at the writer's own priority.
		if _, err := w.Write([]byte(m.text)); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	// The sentinel goes last: user.notice lands in syslog and user.log,
	// and a unix datagram socket keeps the order, so once both files show
	// it everything before it is written.
	if out, err := exec.Command("logger", "-u", sock, "-p", "user.notice", "-t", "lgapp", "--", "debian sentinel").CombinedOutput(); err != nil {
		t.Fatalf("logger: %v\n%s", err, out)
	}
}

func readLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// jsonFacsev renders our JSON lines as rsyslog's template does.
func jsonFacsev(t *testing.T, lines []string) []string {
	t.Helper()
	var out []string
	for _, l := range lines {
		if l == "" {
			continue
		}
		var r struct {
			Message string
			Syslog  struct{ Facility, Severity int }
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("not JSON: %v: %q", err, l)
		}
		out = append(out, fmt.Sprintf("%d.%d %s", r.Syslog.Facility, r.Syslog.Severity, r.Message))
	}
	return out
}

func TestDebianRulesMatchRsyslog(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	if rsyslogd() == "" {
		testenv.SkipOrFail(t, "rsyslogd not installed (scripts/setup.sh installs it)")
	}
	testenv.RequireCommand(t, "logger")
	testenv.RequireCommand(t, "python3")
	dir := testenv.ShortTempDir(t)

	// rsyslog with Debian's rules.
	rsDir := filepath.Join(dir, "rs")
	os.MkdirAll(rsDir, 0o755)
	rsSock := filepath.Join(dir, "rs.sock")
	conf := filepath.Join(dir, "rsyslog.conf")
	os.WriteFile(conf, []byte(rsyslogDebianConf(rsDir, rsSock)), 0o644)
	rs := exec.Command(rsyslogd(), "-n", "-f", conf, "-i", filepath.Join(dir, "rsyslog.pid"))
	var rsOut syncBuffer
	rs.Stdout, rs.Stderr = &rsOut, &rsOut
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Process.Signal(syscall.SIGTERM); rs.Wait() })
	testenv.Poll(t, 15*time.Second, "rsyslog's socket", func() (string, bool) {
		_, err := os.Stat(rsSock)
		return rsOut.String(), err == nil
	})

	// The aggregator with the example, its paths moved under dir.
	agDir := filepath.Join(dir, "ag")
	os.MkdirAll(agDir, 0o755)
	agSock := filepath.Join(dir, "ag.sock")
	example, err := os.ReadFile(filepath.Join("..", "..", "contrib", "examples", "debian-rsyslog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.ReplaceAll(string(example), "/var/log/", agDir+"/")
	moved = strings.ReplaceAll(moved, "unixgram:///dev/log", "unixgram://"+agSock)
	if !strings.Contains(moved, agSock) || strings.Contains(moved, "/var/log") {
		t.Fatalf("the example's paths were not all moved:\n%s", moved)
	}
	agConf := filepath.Join(dir, "logagg.yaml")
	os.WriteFile(agConf, []byte(moved), 0o644)
	// --output after startAgg's own: the example's main output, moved.
	p := startAgg(t, dir, "--config", agConf, "--output", filepath.Join(agDir, "syslog"))

	sendDebianCorpus(t, rsSock)
	sendDebianCorpus(t, agSock)

	for _, f := range []string{"syslog", "user.log"} {
		testenv.Poll(t, 30*time.Second, "the sentinel in both "+f, func() (string, bool) {
			rsl, agl := readLines(filepath.Join(rsDir, f)), readLines(filepath.Join(agDir, f))
			done := len(rsl) > 0 && strings.HasSuffix(rsl[len(rsl)-1], "debian sentinel") &&
				len(agl) > 0 && strings.Contains(agl[len(agl)-1], `"debian sentinel"`)
			return fmt.Sprintf("rsyslog %d lines, aggregator %d", len(rsl), len(agl)), done
		})
	}
	p.stop(syscall.SIGTERM)

	total := 0
	for _, f := range debianFiles {
		// rsyslog's MSG keeps the space after "tag:", which our message
		// drops (docs/records.md): compare without it.
		rsl := readLines(filepath.Join(rsDir, f))
		for i, l := range rsl {
			if fs, msg, ok := strings.Cut(l, " "); ok {
				rsl[i] = fs + " " + strings.TrimPrefix(msg, " ")
			}
		}
		agl := jsonFacsev(t, readLines(filepath.Join(agDir, f)))
		if len(rsl) == 1 && rsl[0] == "" {
			rsl = nil
		}
		slices.Sort(rsl)
		slices.Sort(agl)
		if !slices.Equal(rsl, agl) {
			for i := range min(len(rsl), len(agl)) {
				if rsl[i] != agl[i] {
					t.Logf("%s: first sorted difference at %d: rsyslog %q, aggregator %q", f, i, rsl[i], agl[i])
					break
				}
			}
			t.Errorf("%s: rsyslog wrote %d lines, the aggregator %d; first differences:\n%s", f, len(rsl), len(agl), firstDiffs(rsl, agl, 8))
		}
		total += len(agl)
		t.Logf("%s: %d lines in both", f, len(agl))
	}
	// Every message landed somewhere, and the auth ones only in auth.log.
	if want := 3*192 - 4*8 + 1; total < want {
		t.Errorf("%d lines in all, fewer than the %d messages sent", total, want)
	}
	for _, l := range readLines(filepath.Join(agDir, "syslog")) {
		if strings.Contains(l, `"facility":4,`) || strings.Contains(l, `"facility":10,`) {
			t.Errorf("an auth record in syslog: %s", l)
			break
		}
	}
}

// firstDiffs lists lines only one side has, at most n.
func firstDiffs(a, b []string, n int) string {
	in := func(s []string) map[string]int {
		m := map[string]int{}
		for _, x := range s {
			m[x]++
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, x := range a {
		if mb[x] == 0 && len(out) < n {
			out = append(out, "  only rsyslog:    "+x)
		}
	}
	for _, x := range b {
		if ma[x] == 0 && len(out) < 2*n {
			out = append(out, "  only aggregator: "+x)
		}
	}
	return strings.Join(out, "\n")
}

// TestOutputsFailIndependently: one output on a full disk, dropping when
// full, the other on a healthy one: every record reaches the healthy
// output, the full one's losses are counted with their cause, and
// producers are never held back.
func TestOutputsFailIndependently(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	testenv.RequireRoot(t)
	dir := testenv.ShortTempDir(t)
	disk := filepath.Join(dir, "disk")
	os.MkdirAll(disk, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", disk).CombinedOutput(); err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("cannot mount a tmpfs: %v %s", err, out))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", disk).Run() })
	sock := filepath.Join(dir, "s.sock")
	conf := filepath.Join(dir, "logagg.yaml")
	os.WriteFile(conf, []byte(fmt.Sprintf(`
outputs:
  full: {path: %s, fsync: never, max_size: 0, direct_io: false}
rules:
  - {name: both, route: [default, full]}
`, filepath.Join(disk, "full.jsonl"))), 0o644)
	p := startAgg(t, dir, "--config", conf, "--listen", "unix://"+sock, "--queue-batches", "8")
	const n = 60000 // 15+ MB of records: the 1 MiB disk fills early
	prod := exec.Command(testenv.Binary(t, "producer"), "unixsock", "256", "--addr", "unix://"+sock, "--count", fmt.Sprint(n),
		"--rate", "0", "--seq", "--id", "indep", "--json-summary")
	var perr bytes.Buffer
	prod.Stderr = &perr
	if err := prod.Run(); err != nil {
		t.Fatalf("producer (held back by the full output?): %v\n%s", err, perr.String())
	}
	p.waitMetric(n, "logagg_records_out_total")
	healthy := localStamps(t, p.output)
	if len(healthy) != n {
		t.Errorf("the healthy output holds %d of %d records", len(healthy), n)
	}
	full := p.metric("logagg_output_dropped_total", `output="full"`, `cause="output_full"`)
	written := p.metric("logagg_output_records_total", `output="full"`)
	if full == 0 {
		t.Errorf("nothing counted dropped for the full output (wrote %v)", written)
	}
	if p.metric("logagg_dropped_total") != 0 {
		t.Errorf("records counted dropped for their listener: they all reached their first output")
	}
	t.Logf("full output: %v written, %v dropped (output_full); healthy output: %d", written, full, len(healthy))
	p.signal(syscall.SIGKILL) // its full disk would hold a clean stop for the drain timeout
}
