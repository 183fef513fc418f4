package file_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The files in testdata/captured are logs that real container runtimes
// wrote while a container ran testdata/captured/emit.sh: podman's conmon in
// the CRI format (k8s-file), containerd's CRI plugin in the same format,
// Docker's json-file driver. README.md there says how to capture them
// again. The runtimes cut the long lines in pieces where they please
// (conmon at every read of its pipe, 8 KiB at most; containerd and Docker
// at 16 KiB), so these files hold the pieces as the runtimes make them,
// not as our tests would.

// printed is one line emit.sh prints.
type printed struct {
	stream string // "stdout" or "stderr"
	text   string // without its newline
}

// javaTrace is the stack trace emit.sh prints on stdout, one line each.
var javaTrace = []string{
	"2024-05-01 12:00:00,123 ERROR [main] com.example.App - request failed",
	"java.lang.IllegalStateException: boom",
	"\tat com.example.App.handle(App.java:42)",
	"\tat com.example.App.main(App.java:10)",
	"Caused by: java.io.IOException: disk full",
	"\tat com.example.Disk.write(Disk.java:7)",
	"\t... 1 more",
}

// emitted is what emit.sh prints, in the order it prints it, built here
// from the script (not from any runtime's or the aggregator's output); the
// last line has no newline.
func emitted() []printed {
	seq := func(prefix, each string, n int) string {
		var b strings.Builder
		b.WriteString(prefix)
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, each, i)
		}
		return b.String()
	}
	out := func(s ...string) []printed {
		p := make([]printed, len(s))
		for i := range s {
			p[i] = printed{"stdout", s[i]}
		}
		return p
	}
	err := func(s ...string) []printed {
		p := out(s...)
		for i := range p {
			p[i].stream = "stderr"
		}
		return p
	}
	var w []printed
	w = append(w, out("out 1: hello from stdout", "out 2: second line", "out 3: third line")...)
	w = append(w, err("err 1: warning on stderr", "err 2: second stderr line")...)
	w = append(w, out("",
		"utf8: Grüße, naïve café, 日本語, Ελληνικά, emoji \U0001F680",
		seq("long: ", "%04d.", 8000), // 40,006 bytes
		"after long")...)
	// 20,005 bytes on stderr
	w = append(w, err(seq("errl:", "%04d,", 4000))...)
	// 20,006 bytes of 3-byte characters; 16,384 bytes
	w = append(w, out(seq("wide: ", "%04d日本", 2000), "edge:"+strings.Repeat("x", 16379))...)
	w = append(w, out(javaTrace...)...)
	w = append(w, out("2024-05-01 12:00:01,000 INFO [main] com.example.App - recovered",
		"progress 10%\rprogress 50%\rprogress 100%",
		"crlf line\r",
		"\x1b[31mred\x1b[0m and \x1b[1mbold\x1b[0m (ANSI colours)",
		`json specials: <tag> & "quotes" \backslash`+"\ttab")...)
	w = append(w, err("", "err 3: after an empty stderr line")...)
	w = append(w, out("last line without newline")...)
	return w
}

// dockerKeeps is what Docker's json-file log holds of a line: the copier
// cuts it in pieces of 16 KiB, and the JSON encoder writes every byte of a
// piece that is not valid UTF-8 as U+FFFD, so a character cut in two by
// the 16 KiB boundary is lost in the file (three U+FFFD for a 3-byte
// character cut after its first byte). No reader of the file can give it
// back.
func dockerKeeps(line string) string {
	var b strings.Builder
	for len(line) > 0 {
		p := line[:min(len(line), 16<<10)]
		line = line[len(p):]
		for len(p) > 0 {
			r, n := utf8.DecodeRuneInString(p)
			if r == utf8.RuneError && n == 1 {
				b.WriteString("\uFFFD")
			} else {
				b.WriteString(p[:n])
			}
			p = p[n:]
		}
	}
	return b.String()
}

// keptWhole is what a runtime that writes raw bytes (the CRI format) keeps
// of a line: all of it.
func keptWhole(s string) string { return s }

// criPiece reports whether CRI log line l is a piece (P) of a longer line
// on stream s.
func criPiece(l []byte, s string) bool { return bytes.Contains(l, []byte(" "+s+" P ")) }

// captures are the captured files, with the format they are in and what
// the runtime keeps of a line.
var captures = []struct {
	name, file, format string
	keeps              func(string) string
	piece              func(line []byte, stream string) bool // a line of the file that is a piece of a longer one
}{
	{"podman", "podman-k8s-file.log", "cri", keptWhole, criPiece},
	{"containerd", "containerd-cri.log", "cri", keptWhole, criPiece},
	{"docker", "docker-json-file.log", "docker", dockerKeeps,
		func(l []byte, s string) bool {
			return bytes.Contains(l, []byte(`"stream":"`+s+`"`)) && !bytes.Contains(l, []byte(`\n","stream":`))
		}},
}

// TestCapturedContainerLogs: the logs real runtimes wrote (testdata/captured)
// read as container files give one record per line the program printed, in
// the order printed: the content byte for byte (the long lines put back
// together from the runtime's pieces, however it cut them, also inside a
// UTF-8 character), the stream in agg.stream, the runtime's time in
// agg.source_time, the last line, printed without its newline, flagged
// partial after partial_timeout; nothing lost, repeated or cut. The format
// is given (format=cri, format=docker) or detected; with multiline=java the
// stack trace is one record and the stream's other lines are as printed.
func TestCapturedContainerLogs(t *testing.T) {
	for _, c := range captures {
		data, err := os.ReadFile(filepath.Join("testdata", "captured", c.file))
		if err != nil {
			t.Fatal(err)
		}
		// A capture whose lines are all whole would not test the joining
		// (its last line is the one printed without a newline).
		lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		lines = lines[:len(lines)-1]
		for _, s := range []string{"stdout", "stderr"} {
			n := 0
			for _, l := range lines {
				if c.piece(l, s) {
					n++
				}
			}
			if n == 0 {
				t.Fatalf("%s holds no piece of a %s line", c.file, s)
			}
		}
		want := emitted()
		for i := range want {
			// The record encoder drops one trailing CR of every input's
			// records (a CRLF line's, record.Encoder): "crlf line\r" is
			// "crlf line" on every input. CRs inside a line stay.
			want[i].text = strings.TrimSuffix(c.keeps(want[i].text), "\r")
		}
		for _, mode := range []string{c.format, "auto", "java"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				dir, state := tempDirs(t)
				p := filepath.Join(dir, c.file)
				appendFile(t, p, string(data))
				q := "?from=start&partial_timeout=200ms&format=" + mode
				w := want
				if mode == "java" {
					q = "?from=start&partial_timeout=200ms&multiline_timeout=200ms&multiline=java&format=" + c.format
					w = joinTrace(want)
				}
				in := start(t, "file://"+p+q, state)
				in.wait(len(w))
				time.Sleep(500 * time.Millisecond) // a record too many would come by now
				r := in.records()
				if mode == "java" {
					// A multi-line record waits for the stream's next line:
					// the streams' records keep their order, not each other's.
					for _, s := range []string{"stdout", "stderr"} {
						checkRecords(t, p, pick(r, s), pickWant(w, s))
					}
					return
				}
				checkRecords(t, p, r, w)
			})
		}
	}
}

// checkRecords compares the records with the lines the program printed,
// one for one and in order.
func checkRecords(t *testing.T, path string, r []rec, want []printed) {
	t.Helper()
	if len(r) != len(want) {
		t.Errorf("%d records, want %d", len(r), len(want))
	}
	for i := range min(len(r), len(want)) {
		x, w := r[i], want[i]
		if x.Message != w.text {
			t.Errorf("record %d (%s): %s", i, w.stream, diffAt(x.Message, w.text))
		}
		if x.Agg.Stream != w.stream {
			t.Errorf("record %d %.40q: stream %q, want %q", i, w.text, x.Agg.Stream, w.stream)
		}
		if x.Agg.File != path {
			t.Errorf("record %d: file %q, want %q", i, x.Agg.File, path)
		}
		if _, err := time.Parse(time.RFC3339Nano, x.Agg.SourceTime); err != nil {
			t.Errorf("record %d %.40q: source_time %q: %v", i, w.text, x.Agg.SourceTime, err)
		}
		last := i == len(want)-1 && w.stream == "stdout" // printed without a newline
		for _, f := range []string{"truncated", "continuation", "partial"} {
			if x.has(f) != (last && f == "partial") {
				t.Errorf("record %d %.40q: flags %v", i, w.text, x.Agg.Flags)
			}
		}
	}
	for i := len(want); i < len(r); i++ {
		t.Errorf("record %d too many: %.200s", i, r[i].Raw)
	}
}

// joinTrace is want with the stack trace's lines in one record, as
// multiline=java puts them.
func joinTrace(want []printed) []printed {
	var out []printed
	for i := 0; i < len(want); i++ {
		if want[i].text == javaTrace[0] {
			out = append(out, printed{want[i].stream, strings.Join(javaTrace, "\n")})
			i += len(javaTrace) - 1
			continue
		}
		out = append(out, want[i])
	}
	return out
}

func pick(r []rec, stream string) []rec {
	var out []rec
	for _, x := range r {
		if x.Agg.Stream == stream {
			out = append(out, x)
		}
	}
	return out
}

func pickWant(w []printed, stream string) []printed {
	var out []printed
	for _, x := range w {
		if x.stream == stream {
			out = append(out, x)
		}
	}
	return out
}

// diffAt says where got and want part, without printing 40 KB lines.
func diffAt(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-20)
	return fmt.Sprintf("%d bytes, want %d; they part at byte %d: got %q, want %q",
		len(got), len(want), i, got[from:min(len(got), i+20)], want[from:min(len(want), i+20)])
}

// TestCapturedScript: emitted is what emit.sh prints, stream by stream
// (the test above trusts it). The script runs under busybox, which ran it
// in the captures, where it is installed, else under /bin/sh with the
// system's printf, seq, tr, sed and head.
func TestCapturedScript(t *testing.T) {
	shell := []string{"/bin/sh"}
	if bb, err := exec.LookPath("busybox"); err == nil {
		shell = []string{bb, "sh"}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(shell[0], append(shell[1:], filepath.Join("testdata", "captured", "emit.sh"))...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("emit.sh: %v: %s", err, stderr.Bytes())
	}
	for _, s := range []struct {
		name string
		got  string
	}{{"stdout", stdout.String()}, {"stderr", stderr.String()}} {
		var want strings.Builder
		for _, p := range pickWant(emitted(), s.name) {
			want.WriteString(p.text)
			want.WriteByte('\n')
		}
		w := want.String()
		if s.name == "stdout" {
			w = strings.TrimSuffix(w, "\n") // the last line has none
		}
		if s.got != w {
			t.Errorf("%s: %s", s.name, diffAt(s.got, w))
		}
	}
}
