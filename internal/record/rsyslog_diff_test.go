package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// TestRsyslogAgrees is the differential test of the syslog decoders: it
// sends every line of testdata/syslog-corpus.jsonl to rsyslogd (the
// reference, see rfc3164.go) twice, over imudp (hostname parsed, as on all
// our listeners but unixgram) and over imuxsock with the parser chain and
// parseHostname off (as on our unixgram listener), has rsyslog print the
// properties it extracted, and compares them field by field with what our
// Encoder renders with Meta.ParseHostname true and false. The only
// differences allowed are those in rsyslogDifferences.
//
// A payload with a space after its PRI is also sent without that space:
// where rsyslog reads no timestamp in the first and one in the second
// (srslog's default form, "<PRI> RFC3339 HOST TAG: MSG"), we must read the
// first as rsyslog's imudp reads the second, on both of our inputs.
func TestRsyslogAgrees(t *testing.T) {
	bin, err := exec.LookPath("rsyslogd")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/rsyslogd"); err != nil {
			testenv.SkipOrFail(t, "rsyslogd not installed (scripts/setup.sh installs it)")
		}
		bin = "/usr/sbin/rsyslogd"
	}
	payloads, lines := readCorpus(t)
	send := payloads
	seen := map[string]bool{}
	for _, p := range payloads {
		seen[string(p)] = true
	}
	for _, p := range payloads {
		if q := despaced(p); q != nil && !seen[string(q)] {
			seen[string(q)] = true
			send = append(send, q)
		}
	}
	rs := startRsyslog(t, bin)
	got := rs.run(t, send)

	used := map[string]int{}
	mismatches, secondsOnly := 0, 0
	for _, p := range payloads {
		for _, in := range []rsyslogInput{inUDP, inUnix} {
			props, ok := got[in][string(rsyslogRawmsg(p))]
			if !ok {
				t.Errorf("%s: rsyslog printed nothing for %q", in.name, p)
				continue
			}
			srslogForm := false
			if q := despaced(p); q != nil && props.Reported == props.Generated {
				if alt, ok := got[inUDP][string(rsyslogRawmsg(q))]; ok && alt.Reported != alt.Generated {
					props, srslogForm = alt, true
				}
			}
			if _, _, exact := parseRsyslogTime(props.Reported); !exact && props.Reported != props.Generated {
				secondsOnly++
			}
			diffs, exc := compareWithRsyslog(p, in.parseHostname, props)
			if srslogForm {
				exc = "srslog's space"
			}
			if exc != "" {
				used[exc]++
			}
			if len(diffs) > 0 {
				mismatches++
				t.Errorf("%s, %q:\n  %s\n  rsyslog: %+v", in.name, p, strings.Join(diffs, "\n  "), props)
			}
		}
	}
	var summary []string
	for _, d := range rsyslogDifferences {
		summary = append(summary, fmt.Sprintf("%s: %d", d.name, used[d.name]))
	}
	t.Logf("%d corpus lines, %d distinct payloads, each over imudp and imuxsock: %d of %d comparisons differ; "+
		"allowed differences used: %s; timestamps compared to the second only (rsyslog prints more than 6 fraction digits wrongly): %d",
		lines, len(payloads), mismatches, 2*len(payloads), strings.Join(summary, ", "), secondsOnly)
}

// rsyslogDifferences are the only ways our decoding may differ from
// rsyslog's. compareWithRsyslog applies them by name.
var rsyslogDifferences = []struct{ name, why string }{
	{"no PRI", "a payload that does not start with '<' is not syslog to us (a raw record); rsyslog " +
		"gives it the default PRI 13 and parses the rest as a header. The corpus has such records where a " +
		"datagram or stream frame carried a multi-line message: its later lines are records of their own."},
	{"invalid PRI", "a PRI other than '<' 1-3 digits '>' up to 191 keeps the payload raw and flagged " +
		"syslog_parse; rsyslog reads \"<>\" as 0 and any number of leading zeros, and uses the whole payload " +
		"as MSG of a record with an invalid PRI otherwise. A leading '<' is more often not syslog at all."},
	{"inner NUL", "rsyslog replaces a NUL inside a message (one at the very end is dropped by both) with " +
		"\"#000\" because its strings end at NUL; we keep the byte, JSON-escaped. Compared after replacing " +
		"ours the same way."},
	{"year", "an RFC 3164 timestamp without a year that would lie more than yearSlack (31 days) in the " +
		"future belongs to the previous year for us (\"Dec 31\" received on Jan 1); rsyslog always takes " +
		"the receive year."},
	{"srslog's space", "a space after the PRI, then an RFC 3339 timestamp (srslog's default format): rsyslog " +
		"reads no timestamp and an empty TAG, so the whole header is its message; we read it as syslog-ng " +
		"does, and as rsyslog's imudp reads the same payload without the space (a hostname looked for on " +
		"every listener). Compared with that."},
}

// despaced is p without the space after its PRI, or nil when p has a
// valid PRI not followed by a space and a digit (where an RFC 3339
// timestamp could start).
func despaced(p []byte) []byte {
	p = trimEnd(p)
	_, n, ok := parsePRI(p)
	if !ok || n+1 >= len(p) || p[n] != ' ' || !isDigit(p[n+1]) {
		return nil
	}
	return append(append([]byte(nil), p[:n]...), p[n+1:]...)
}

type rsyslogInput struct {
	name          string
	parseHostname bool
}

var (
	inUDP  = rsyslogInput{"imudp", true}
	inUnix = rsyslogInput{"imuxsock", false}
)

// readCorpus returns the distinct payloads of the corpus, in order of first
// appearance, and the number of lines.
func readCorpus(t *testing.T) ([][]byte, int) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "syslog-corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	var payloads [][]byte
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct{ Client, Transport, Bytes string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("corpus line %d: %v", n+1, err)
		}
		n++
		if l.Client == "" || l.Transport == "" || l.Bytes == "" {
			t.Fatalf("corpus line %d lacks client, transport or bytes", n)
		}
		if !seen[l.Bytes] {
			seen[l.Bytes] = true
			payloads = append(payloads, []byte(l.Bytes))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return payloads, n
}

// rsyslogRawmsg is what rsyslog's rawmsg property holds for a payload: its
// sanitiser drops one trailing NUL and writes any other NUL as "#000"
// (escapeControlCharactersOnReceive off escapes nothing else).
func rsyslogRawmsg(p []byte) []byte {
	p = bytes.TrimSuffix(p, []byte{0})
	return bytes.ReplaceAll(p, []byte{0}, []byte("#000"))
}

// rsyslogProps is one line of rsyslog's output: the properties of a message.
type rsyslogProps struct {
	Input         string `json:"input"`
	Rawmsg        string `json:"rawmsg"`
	Msg           string `json:"msg"`
	Programname   string `json:"programname"`
	Appname       string `json:"appname"`
	Procid        string `json:"procid"`
	Msgid         string `json:"msgid"`
	Hostname      string `json:"hostname"`
	Fromhost      string `json:"fromhost"`
	Syslogtag     string `json:"syslogtag"`
	Facility      string `json:"facility"`
	Severity      string `json:"severity"`
	Protocol      string `json:"protocol"`
	Reported      string `json:"reported"`
	ReportedUnix  string `json:"reportedunix"`
	Generated     string `json:"generated"`
	GeneratedUnix string `json:"generatedunix"`
}

// rsyslogConf: one imudp and one imuxsock input, the latter with the
// regular parser chain and no hostname parsing; control characters are not
// escaped, so what the parser sees is the payload; no DNS, so fromhost of a
// UDP record is 127.0.0.1, and a local host name no parsed hostname can
// equal, so fromhost tells a filled-in hostname from a parsed one.
const rsyslogConf = `global(workDirectory="{{dir}}" maxMessageSize="64k"
  parser.escapeControlCharactersOnReceive="off" net.enableDNS="off" localHostname="rsyslog-local!")
module(load="imudp")
module(load="imuxsock" SysSock.Use="off")
main_queue(queue.workerThreads="1")
template(name="props" type="string" string="{\"input\":\"%inputname%\",\"rawmsg\":\"%rawmsg:::json%\",\"msg\":\"%msg:::json%\",\"programname\":\"%programname:::json%\",\"appname\":\"%app-name:::json%\",\"procid\":\"%procid:::json%\",\"msgid\":\"%msgid:::json%\",\"hostname\":\"%hostname:::json%\",\"fromhost\":\"%fromhost:::json%\",\"syslogtag\":\"%syslogtag:::json%\",\"facility\":\"%syslogfacility%\",\"severity\":\"%syslogseverity%\",\"protocol\":\"%protocol-version%\",\"reported\":\"%timereported:::date-rfc3339,json%\",\"reportedunix\":\"%timereported:::date-unixtimestamp%\",\"generated\":\"%timegenerated:::date-rfc3339%\",\"generatedunix\":\"%timegenerated:::date-unixtimestamp%\"}\n")
input(type="imudp" address="127.0.0.1" port="{{port}}")
input(type="imuxsock" Socket="{{sock}}" useSpecialParser="off" parseHostname="off" ignoreTimestamp="off")
if $inputname == "imudp" or $inputname == "imuxsock" then action(type="omfile" file="{{out}}" template="props")
`

type rsyslogd struct {
	cmd     *exec.Cmd
	out     string
	udp     *net.UDPConn
	unix    *net.UnixConn
	sock    string
	stderr  *bytes.Buffer
	outFile *os.File
	read    []byte // output read so far, up to its last newline
	lines   int
}

// startRsyslog runs rsyslogd in the foreground with a private config and
// waits until both inputs deliver.
func startRsyslog(t *testing.T, bin string) *rsyslogd {
	t.Helper()
	dir := testenv.ShortTempDir(t)
	// A free port: bind, note, release (rsyslog cannot report the port of
	// port 0). Another process taking it in between fails the probe below.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	r := &rsyslogd{out: filepath.Join(dir, "out.jsonl"), sock: filepath.Join(dir, "in.sock"), stderr: new(bytes.Buffer)}
	conf := strings.NewReplacer("{{dir}}", dir, "{{port}}", strconv.Itoa(port), "{{sock}}", r.sock, "{{out}}", r.out).Replace(rsyslogConf)
	confPath := filepath.Join(dir, "rsyslog.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(bin, "-n", "-f", confPath, "-i", filepath.Join(dir, "rsyslog.pid"))
	r.cmd.Stdout, r.cmd.Stderr = r.stderr, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { r.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			r.cmd.Process.Kill()
			<-exited
		}
		if r.outFile != nil {
			r.outFile.Close()
		}
	})
	r.udp, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.udp.Close() })
	r.unix, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "client.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.unix.Close() })

	// Ready when a probe sent to each input comes out. Until rsyslog has
	// bound them, datagrams are refused or lost, so the probes repeat.
	probes := 0
	inputs := map[string]bool{}
	if _, ok := testenv.Until(15*time.Second, func() (struct{}, bool) {
		select {
		case <-exited:
			t.Fatalf("rsyslogd exited at start-up:\n%s", r.stderr)
		default:
		}
		probe := []byte(fmt.Sprintf("<13>probe %d", probes))
		probes++
		r.udp.Write(probe)
		r.unix.WriteToUnix(probe, &net.UnixAddr{Name: r.sock, Net: "unixgram"})
		r.poll(t, func(p rsyslogProps) { inputs[p.Input] = true })
		return struct{}{}, inputs["imudp"] && inputs["imuxsock"]
	}); !ok {
		t.Fatalf("rsyslogd did not deliver the probes within 15s:\n%s", r.stderr)
	}
	return r
}

// poll reads the complete output lines written since the last call.
func (r *rsyslogd) poll(t *testing.T, each func(rsyslogProps)) {
	t.Helper()
	if r.outFile == nil {
		f, err := os.Open(r.out)
		if err != nil {
			return // not created yet
		}
		r.outFile = f
	}
	buf := make([]byte, 1<<16)
	for {
		n, err := r.outFile.Read(buf)
		r.read = append(r.read, buf[:n]...)
		if err == io.EOF || n == 0 {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for {
		i := bytes.IndexByte(r.read, '\n')
		if i < 0 {
			return
		}
		var p rsyslogProps
		if err := json.Unmarshal(r.read[:i], &p); err != nil {
			t.Fatalf("rsyslog output line %q: %v", r.read[:i], err)
		}
		r.read = r.read[i+1:]
		r.lines++
		each(p)
	}
}

// run sends every payload to both inputs and returns rsyslog's properties
// by input name and rawmsg. At most window payloads are in flight, so the
// UDP input's socket buffer cannot overflow.
func (r *rsyslogd) run(t *testing.T, payloads [][]byte) map[rsyslogInput]map[string]rsyslogProps {
	t.Helper()
	got := map[rsyslogInput]map[string]rsyslogProps{inUDP: {}, inUnix: {}}
	received := 0
	collect := func(p rsyslogProps) {
		if strings.HasPrefix(p.Rawmsg, "<13>probe ") {
			return
		}
		in := inUDP
		if p.Input == "imuxsock" {
			in = inUnix
		}
		got[in][p.Rawmsg] = p
		received++
	}
	const window = 16
	wait := func(want int) {
		if _, ok := testenv.Until(30*time.Second, func() (struct{}, bool) {
			r.poll(t, collect)
			return struct{}{}, received >= want
		}); !ok {
			t.Fatalf("rsyslog printed %d of %d messages within 30s:\n%s", received, want, r.stderr)
		}
	}
	sock := &net.UnixAddr{Name: r.sock, Net: "unixgram"}
	for i, p := range payloads {
		wait(2 * (i - window))
		if _, err := r.udp.Write(p); err != nil {
			t.Fatal(err)
		}
		if _, err := r.unix.WriteToUnix(p, sock); err != nil {
			t.Fatal(err)
		}
	}
	wait(2 * len(payloads))
	return got
}

// compareWithRsyslog decodes p as a listener with the given ParseHostname
// would and lists how the result differs from rsyslog's properties, apart
// from the allowed difference it names (if one applies).
func compareWithRsyslog(p []byte, parseHostname bool, rs rsyslogProps) (diffs []string, allowed string) {
	recv, err := strconv.ParseInt(rs.GeneratedUnix, 10, 64)
	if err != nil {
		return []string{"rsyslog's timegenerated: " + err.Error()}, ""
	}
	// Our receive time is rsyslog's, to the second; the fraction matters
	// to neither year inference nor zone offset.
	m := &Meta{RecvNS: recv * 1e9, ParseHostname: parseHostname}
	m.Prepare()
	e := NewEncoder()
	out, res := e.Append(nil, p, m, 0)
	tag := string(e.Fields().Tag)
	var o struct {
		Message   string
		Level     string
		Source    *string
		Timestamp *string
		Syslog    *struct {
			Facility, Severity                    int
			Hostname, Appname, Procid, Msgid, Tag *string
		}
	}
	if err := json.Unmarshal(out, &o); err != nil {
		return []string{fmt.Sprintf("our output %q: %v", out, err)}, ""
	}
	trimmed := trimEnd(p)
	if _, _, ok := parsePRI(trimmed); !ok {
		allowed = "invalid PRI"
		if len(trimmed) == 0 || trimmed[0] != '<' {
			allowed = "no PRI"
		}
		want := Result{Format: FormatRaw, Flags: FlagSyslogParse}
		if allowed == "no PRI" {
			want.Flags = 0
		}
		if res.Format != FormatRaw || res.Flags&(FlagSyslogParse) != want.Flags || o.Message != string(trimmed) || o.Syslog != nil {
			diffs = append(diffs, fmt.Sprintf("not kept raw: %s", out))
		}
		return diffs, allowed
	}
	if bytes.IndexByte(trimmed, 0) >= 0 {
		allowed = "inner NUL"
	}
	nul := func(s string) string { return strings.ReplaceAll(s, "\x00", "#000") }
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return nul(*s)
	}
	check := func(field, ours, theirs string) {
		if ours != theirs {
			diffs = append(diffs, fmt.Sprintf("%s: ours %q, rsyslog %q", field, ours, theirs))
		}
	}
	if o.Syslog == nil {
		return []string{fmt.Sprintf("not decoded: %s", out)}, allowed
	}
	check("facility", strconv.Itoa(o.Syslog.Facility), rs.Facility)
	check("severity", strconv.Itoa(o.Syslog.Severity), rs.Severity)
	check("level", o.Level, severityNames[o.Syslog.Severity&7])

	// rsyslog's "-" (and an empty value) is our absent member.
	dash := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	wantHost := dash(rs.Hostname)
	if rs.Hostname == rs.Fromhost && str(o.Syslog.Hostname) != rs.Hostname {
		// rsyslog filled in the sender: no hostname came from the payload.
		// (A payload naming the sender's address, "127.0.0.1", is told
		// apart by the TAG and message compared below.)
		wantHost = ""
	}
	check("hostname", str(o.Syslog.Hostname), wantHost)
	check("procid", str(o.Syslog.Procid), dash(rs.Procid))

	if isRFC5424(trimmed) {
		check("format", res.Format.String(), "rfc5424")
		check("protocol", rs.Protocol, "1")
		check("message", nul(o.Message), rs.Msg)
		check("appname", str(o.Syslog.Appname), dash(rs.Appname))
		check("msgid", str(o.Syslog.Msgid), dash(rs.Msgid))
		wantSource := dash(rs.Appname)
		if wantSource == "" {
			wantSource = wantHost
		}
		check("source", str(o.Source), wantSource)
		if o.Syslog.Tag != nil || tag != "" {
			diffs = append(diffs, "a TAG in an RFC 5424 record")
		}
		diffs = append(diffs, compareTimestamp(o.Timestamp, rs, false)...)
		return diffs, allowed
	}

	check("format", res.Format.String(), "rfc3164")
	check("protocol", rs.Protocol, "0")
	// rsyslog keeps the SP after "tag:" in MSG; we drop one leading SP.
	check("message", nul(o.Message), strings.TrimPrefix(rs.Msg, " "))
	check("appname", str(o.Syslog.Appname), rs.Programname)
	check("rsyslog app-name", dash(rs.Appname), rs.Programname) // of a legacy record, its programname ("-" when empty)
	if o.Syslog.Msgid != nil {
		diffs = append(diffs, "msgid present in an RFC 3164 record")
	}
	wantSource := rs.Programname
	if wantSource == "" {
		wantSource = wantHost
	}
	check("source", str(o.Source), wantSource)
	// The TAG is rsyslog's syslogtag: always in Fields (for the rules), in
	// the output where it says more than appname and procid.
	check("tag (Fields)", nul(tag), rs.Syslogtag)
	wantTag := rs.Syslogtag
	if tagSaysNoMore(rs.Syslogtag, rs.Programname, rs.Procid) {
		wantTag = ""
	}
	check("tag", str(o.Syslog.Tag), wantTag)
	var h rfc3164Header
	h.parse(trimmed, parseHostname)

	tdiffs := compareTimestamp(o.Timestamp, rs, !h.stamp.hasYear)
	if len(tdiffs) == 1 && tdiffs[0] == "year" {
		return diffs, "year"
	}
	return append(diffs, tdiffs...), allowed
}

// tagSaysNoMore reports whether rsyslog's syslogtag is its programname,
// then optionally "[procid]", then optionally ':'. rsyslog prints "-" for
// a procid that is absent or empty.
func tagSaysNoMore(tag, programname, procid string) bool {
	rest, ok := strings.CutPrefix(tag, programname)
	if !ok {
		return false
	}
	rest = strings.TrimSuffix(rest, ":")
	return rest == "" || rest == "["+procid+"]" || (procid == "-" && rest == "[]")
}

// compareTimestamp compares our "timestamp" with rsyslog's timereported:
// absent when rsyslog used the receive time, else the same instant and UTC
// offset. With inferredYear, a timestamp exactly one year before rsyslog's,
// which lies more than yearSlack after the receive time, is reported as the
// single difference "year".
func compareTimestamp(ours *string, rs rsyslogProps, inferredYear bool) []string {
	if rs.Reported == rs.Generated {
		if ours != nil {
			return []string{fmt.Sprintf("timestamp %q, rsyslog used the receive time", *ours)}
		}
		return nil
	}
	if ours == nil {
		return []string{fmt.Sprintf("no timestamp, rsyslog %q", rs.Reported)}
	}
	o, err := time.Parse(time.RFC3339Nano, *ours)
	if err != nil {
		return []string{fmt.Sprintf("timestamp %q: %v", *ours, err)}
	}
	_, oOff := o.Zone()
	r, rOff, exact := parseRsyslogTime(rs.Reported)
	if !exact {
		// rsyslog prints a fraction of more than six digits wrongly
		// (formatTimestamp3339 handles up to six): compare the seconds,
		// which date-unixtimestamp gets right, and the offset.
		sec, err := strconv.ParseInt(rs.ReportedUnix, 10, 64)
		if err != nil || o.Unix() != sec || oOff != rOff {
			return []string{fmt.Sprintf("timestamp %q, rsyslog %q (unix %s)", *ours, rs.Reported, rs.ReportedUnix)}
		}
		return nil
	}
	if o.Equal(r) && oOff == rOff {
		return nil
	}
	if gen, err := strconv.ParseInt(rs.GeneratedUnix, 10, 64); err == nil && inferredYear && oOff == rOff &&
		o.Equal(r.AddDate(-1, 0, 0)) && r.After(time.Unix(gen, 0).Add(yearSlack)) {
		return []string{"year"}
	}
	return []string{fmt.Sprintf("timestamp %q, rsyslog %q", *ours, rs.Reported)}
}

// parseRsyslogTime reads rsyslog's date-rfc3339 output
// (YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)) without Go's range checks:
// rsyslog prints fields as the sender wrote them (a second 60, a day 31 of
// a short month), which time.Date rolls over as our renderer does. exact is
// false when the text is not of that form.
func parseRsyslogTime(s string) (t time.Time, offset int, exact bool) {
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, 0, false
	}
	num := func(a, b int) int {
		n, err := strconv.Atoi(s[a:b])
		if err != nil {
			exact = false
		}
		return n
	}
	exact = true
	y, mo, d, h, mi, sec := num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19)
	rest, nsec := s[19:], 0
	if strings.HasPrefix(rest, ".") {
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		frac := rest[1:i]
		if len(frac) == 0 || len(frac) > 9 {
			return time.Time{}, 0, false
		}
		nsec, _ = strconv.Atoi(frac + strings.Repeat("0", 9-len(frac)))
		rest = rest[i:]
	}
	switch {
	case rest == "Z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, err1 := strconv.Atoi(rest[1:3])
		om, err2 := strconv.Atoi(rest[4:6])
		if err1 != nil || err2 != nil {
			return time.Time{}, 0, false
		}
		offset = oh*3600 + om*60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		// Not of the form, e.g. a fraction printed as garbage: the
		// offset is still the tail.
		if n := len(s); n >= 6 && (s[n-6] == '+' || s[n-6] == '-') {
			oh, _ := strconv.Atoi(s[n-5 : n-3])
			om, _ := strconv.Atoi(s[n-2:])
			offset = oh*3600 + om*60
			if s[n-6] == '-' {
				offset = -offset
			}
		}
		return time.Time{}, offset, false
	}
	if !exact {
		return time.Time{}, offset, false
	}
	return time.Date(y, time.Month(mo), d, h, mi, sec, nsec, time.FixedZone("", offset)), offset, true
}

// The corpus is meant to hold a line from every client the issue names;
// this keeps a regeneration from silently losing one.
func TestCorpusCoversClients(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "syslog-corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	clients := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct{ Client string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		clients[l.Client]++
	}
	var missing []string
	for _, c := range []string{
		"python-udp", "python-unixgram", "python-tcp", "python-unix",
		"go-unixgram", "go-unix", "go-udp", "go-tcp",
		"srslog-default-udp", "srslog-default-unixgram", "srslog-default-tcp", "srslog-default-unix", "srslog-default-tcp-octet",
		"srslog-unix-unixgram", "srslog-rfc3164-udp", "srslog-rfc3164-tcp-octet", "srslog-rfc5424-udp",
		"docker-default-unixgram", "docker-default-udp", "docker-rfc3164-tcp",
		"logger-unixgram", "logger-unix", "logger-udp-rfc3164", "logger-udp-rfc5424", "logger-tcp-rfc3164",
		"logger-tcp-octet-rfc3164", "logger-tcp-octet-rfc5424", "logger-udp-sd", "logger-stdin",
		"rsyslog-fwd-udp-forward", "rsyslog-fwd-udp-traditional", "rsyslog-fwd-udp-protocol23", "rsyslog-omuxsock",
		"syslog-ng-network-tcp", "syslog-ng-network-udp", "syslog-ng-syslog-tcp", "syslog-ng-unix-stream", "syslog-ng-unix-dgram",
		"glibc-unixgram", "handmade",
	} {
		if clients[c] == 0 {
			missing = append(missing, c)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("corpus has no lines from %v", missing)
	}
}

// The "year" difference cannot show in the corpus on most days; this checks
// that compareTimestamp allows it exactly where the previous-year rule
// applies.
func TestCompareTimestampYear(t *testing.T) {
	gen := time.Date(2027, 3, 1, 0, 0, 0, 123456000, time.UTC)
	rs := rsyslogProps{Reported: "2027-11-23T04:33:41+00:00", Generated: gen.Format("2006-01-02T15:04:05.000000Z07:00"),
		GeneratedUnix: strconv.FormatInt(gen.Unix(), 10)}
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		ours     *string
		inferred bool
		want     []string
	}{
		{s("2026-11-23T04:33:41Z"), true, []string{"year"}},
		{s("2027-11-23T04:33:41Z"), true, nil},
		{s("2026-11-23T04:33:41Z"), false, []string{`timestamp "2026-11-23T04:33:41Z", rsyslog "2027-11-23T04:33:41+00:00"`}},
		{s("2026-11-23T04:33:41+01:00"), true, []string{`timestamp "2026-11-23T04:33:41+01:00", rsyslog "2027-11-23T04:33:41+00:00"`}},
		{nil, true, []string{`no timestamp, rsyslog "2027-11-23T04:33:41+00:00"`}},
	} {
		if got := compareTimestamp(tc.ours, rs, tc.inferred); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ours %v, inferred year %v: %q, want %q", tc.ours, tc.inferred, got, tc.want)
		}
	}
	// Within yearSlack of the receive time, one year off is a difference.
	rs.Reported = "2027-03-20T04:33:41+00:00"
	if got := compareTimestamp(s("2026-03-20T04:33:41Z"), rs, true); len(got) != 1 || got[0] == "year" {
		t.Errorf("a timestamp within yearSlack: %q", got)
	}
}
