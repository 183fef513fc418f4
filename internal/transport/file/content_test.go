package file_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// TestPartialLastLine: a last line without its newline waits for it; if
// the newline comes, the line is one record; if not, it is written
// flagged partial after partial_timeout, and its rest, when it comes,
// flagged continuation.
func TestPartialLastLine(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, "") // empty: known once it has bytes, and then read from its start
	in := start(t, "file://"+p+"?from=start&partial_timeout=300ms", state)
	appendFile(t, p, "whole\nhal")
	in.wait(1)
	appendFile(t, p, "f done\nwaits")
	r := in.wait(3)
	if r[1].Message != "half done" || r[1].has("partial") {
		t.Errorf("completed line: %s", r[1].Raw)
	}
	if r[2].Message != "waits" || !r[2].has("partial") {
		t.Errorf("timed out line: %s", r[2].Raw)
	}
	appendFile(t, p, " on\n")
	r = in.wait(4)
	if r[3].Message != " on" || !r[3].has("continuation") {
		t.Errorf("rest of the line: %s", r[3].Raw)
	}
}

// TestLongLineAndBinary: a line longer than the maximum record size is
// kept in flagged pieces; binary bytes and invalid UTF-8 are kept,
// flagged, with the lines around them.
func TestLongLineAndBinary(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	long := strings.Repeat("x", 256<<10+100)
	appendFile(t, p, "bin\x00ary\xff\xfe here\nbefore\n"+long+"\nafter\n")
	in := start(t, "file://"+p+"?from=start", state)
	r := in.wait(5)
	if !r[0].has("nul_bytes") || !r[0].has("invalid_utf8") {
		t.Errorf("binary line: %s", r[0].Raw)
	}
	if r[1].Message != "before" || r[4].Message != "after" {
		t.Errorf("lines around: %q %q", r[1].Message, r[4].Message)
	}
	if len(r[2].Message) != 256<<10 || !r[2].has("truncated") || len(r[3].Message) != 100 || !r[3].has("continuation") {
		t.Errorf("long line: %d %v, %d %v", len(r[2].Message), r[2].Agg.Flags, len(r[3].Message), r[3].Agg.Flags)
	}
	testenv.Eventually(t, 5*time.Second, "the binary file reported", func() bool {
		return counter(in, "file_binary") == 1
	})
}

// TestJSONLines: a line that is a JSON object is decoded as on every input
// (its members kept, the path in agg.file); a line that starts like one
// and is not is flagged; a line that starts like syslog is text, as
// rsyslog's imfile reads it.
func TestJSONLines(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, `{"level":"info","msg":"hi"}`+"\n{}\n{\"broken\"\n<13>Nov 26 10:00:00 host app: hi\n")
	in := start(t, "file://"+p+"?from=start", state)
	r := in.wait(4)
	if !strings.HasPrefix(r[0].Raw, `{"level":"info","msg":"hi","agg":{`) || r[0].Agg.File != p || r[0].Agg.Format != "json" {
		t.Errorf("object: %s", r[0].Raw)
	}
	if !strings.HasPrefix(r[1].Raw, `{"agg":{`) || r[1].Agg.File != p {
		t.Errorf("empty object: %s", r[1].Raw)
	}
	if r[2].Message != `{"broken"` || !r[2].has("malformed_json") {
		t.Errorf("malformed: %s", r[2].Raw)
	}
	if r[3].Message != "<13>Nov 26 10:00:00 host app: hi" || r[3].Agg.Format != "raw" {
		t.Errorf("syslog-like line: %s", r[3].Raw)
	}
}

// TestMultilinePresets: Java, Python and Go traces become one record each,
// the lines around them stay records of their own, and the last record is
// written after multiline_timeout.
func TestMultilinePresets(t *testing.T) {
	cases := []struct {
		preset, text string
		want         []string
	}{
		{"java", "2026-11-26 10:00:00 INFO start\n" +
			"2026-11-26 10:00:01 ERROR failed\n" +
			"java.lang.IllegalStateException: boom\n" +
			"\tat com.x.App.run(App.java:10)\n" +
			"\tat com.x.App.main(App.java:5)\n" +
			"Caused by: java.io.IOException: disk\n" +
			"\tat com.x.Disk.write(Disk.java:7)\n" +
			"\t... 2 more\n" +
			"2026-11-26 10:00:02 INFO next\n",
			[]string{"2026-11-26 10:00:00 INFO start", "2026-11-26 10:00:01 ERROR failed\njava.lang.IllegalStateException: boom\n" +
				"\tat com.x.App.run(App.java:10)\n\tat com.x.App.main(App.java:5)\nCaused by: java.io.IOException: disk\n" +
				"\tat com.x.Disk.write(Disk.java:7)\n\t... 2 more", "2026-11-26 10:00:02 INFO next"}},
		{"python", "INFO starting\n" +
			"Traceback (most recent call last):\n" +
			"  File \"a.py\", line 3, in <module>\n" +
			"    f()\n" +
			"KeyError: 'x'\n" +
			"\n" +
			"During handling of the above exception, another exception occurred:\n" +
			"\n" +
			"Traceback (most recent call last):\n" +
			"  File \"a.py\", line 5, in <module>\n" +
			"ValueError: bad\n" +
			"INFO after\n",
			[]string{"INFO starting", "Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n    f()\nKeyError: 'x'\n" +
				"During handling of the above exception, another exception occurred:\nTraceback (most recent call last):\n" +
				"  File \"a.py\", line 5, in <module>\nValueError: bad", "INFO after"}},
		{"go", "starting\n" +
			"panic: runtime error: index out of range [3] with length 1\n" +
			"\n" +
			"goroutine 1 [running]:\n" +
			"main.f(...)\n" +
			"\t/src/main.go:8\n" +
			"main.main()\n" +
			"\t/src/main.go:4 +0x1d\n" +
			"exit status 2\n" +
			"restarted\n",
			[]string{"starting", "panic: runtime error: index out of range [3] with length 1\ngoroutine 1 [running]:\nmain.f(...)\n" +
				"\t/src/main.go:8\nmain.main()\n\t/src/main.go:4 +0x1d\nexit status 2", "restarted"}},
	}
	for _, c := range cases {
		t.Run(c.preset, func(t *testing.T) {
			dir, state := tempDirs(t)
			p := filepath.Join(dir, "app.log")
			appendFile(t, p, c.text)
			in := start(t, "file://"+p+"?from=start&multiline_timeout=200ms&multiline="+c.preset, state)
			in.wait(len(c.want))
			time.Sleep(300 * time.Millisecond)
			r := in.records()
			got := messages(r)
			if strings.Join(got, "\x00") != strings.Join(c.want, "\x00") {
				t.Errorf("got %d records:\n%q\nwant\n%q", len(got), got, c.want)
			}
		})
	}
}

// TestMultilineBounds: multiline_start with a custom pattern, cut at
// multiline_max_lines (flagged truncated, the rest continuation).
func TestMultilineBounds(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, "BEGIN a\n1\n2\n3\n4\nBEGIN b\n5\n")
	in := start(t, "file://"+p+"?from=start&multiline_timeout=100ms&multiline_max_lines=3&multiline_start=%5EBEGIN", state)
	r := in.wait(3)
	want := []string{"BEGIN a\n1\n2", "3\n4", "BEGIN b\n5"}
	if got := messages(r); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !r[0].has("truncated") || !r[1].has("continuation") {
		t.Errorf("flags %v %v", r[0].Agg.Flags, r[1].Agg.Flags)
	}
}

// TestContainerFormats: CRI lines (with partial P lines put together) and
// Docker json-file lines (with its 16 KiB pieces put together) decoded,
// detected per file; the stream goes to agg.stream, the runtime's time to
// agg.source_time, a program's JSON object keeps its members.
func TestContainerFormats(t *testing.T) {
	dir, state := tempDirs(t)
	appendFile(t, filepath.Join(dir, "cri.log"),
		"2026-11-26T10:00:00.000000001Z stdout F hello\n"+
			"2026-11-26T10:00:00.000000002Z stderr P part one, \n"+
			"2026-11-26T10:00:00.000000003Z stdout F between\n"+
			"2026-11-26T10:00:00.000000004Z stderr P part two, \n"+
			"2026-11-26T10:00:00.000000005Z stderr F end\n"+
			"2026-11-26T10:00:00.000000006Z stdout F {\"level\":\"warn\"}\n"+
			"2026-11-26T10:00:00.000000007Z stdout F\n")
	appendFile(t, filepath.Join(dir, "docker.log"),
		`{"log":"one\n","stream":"stdout","time":"2026-11-26T10:00:01Z"}`+"\n"+
			`{"log":"long ","stream":"stderr","time":"2026-11-26T10:00:02Z"}`+"\n"+
			`{"log":"line\n","stream":"stderr","time":"2026-11-26T10:00:03Z"}`+"\n")
	in := start(t, "file://"+dir+"/*.log?from=start", state)
	r := in.wait(7)
	byMsg := map[string]rec{}
	for _, x := range r {
		byMsg[x.Message] = x
	}
	for msg, want := range map[string]struct{ stream, time string }{
		"hello":                   {"stdout", "2026-11-26T10:00:00.000000001Z"},
		"between":                 {"stdout", "2026-11-26T10:00:00.000000003Z"},
		"part one, part two, end": {"stderr", "2026-11-26T10:00:00.000000002Z"},
		"one":                     {"stdout", "2026-11-26T10:00:01Z"},
		"long line":               {"stderr", "2026-11-26T10:00:02Z"},
	} {
		x, ok := byMsg[msg]
		if !ok {
			t.Errorf("no record %q in %s", msg, describe(r))
			continue
		}
		if x.Agg.Stream != want.stream || x.Agg.SourceTime != want.time {
			t.Errorf("%q: stream %q time %q, want %q %q", msg, x.Agg.Stream, x.Agg.SourceTime, want.stream, want.time)
		}
	}
	found := false
	for _, x := range r {
		if strings.HasPrefix(x.Raw, `{"level":"warn","agg":{`) && x.Agg.Stream == "stdout" {
			found = true
		}
	}
	if !found {
		t.Errorf("no JSON object record: %s", describe(r))
	}
}

// TestHostileFiles: a symlink loop, a FIFO and a file that cannot be
// read in the glob are reported with their cause; the good file next to
// them is read.
func TestHostileFiles(t *testing.T) {
	dir, state := tempDirs(t)
	os.Symlink(filepath.Join(dir, "b.log"), filepath.Join(dir, "a.log"))
	os.Symlink(filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log"))
	if err := mkfifo(filepath.Join(dir, "pipe.log")); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(dir, "good.log"), "fine\n")
	in := start(t, "file://"+dir+"/*.log?from=start", state)
	r := in.wait(1)
	if r[0].Message != "fine" {
		t.Fatalf("got %s", r[0].Raw)
	}
	testenv.Eventually(t, 5*time.Second, "the loop and the FIFO reported", func() bool {
		return counter(in, "file_symlink_loop") >= 2 && counter(in, "file_not_regular") == 1
	})
}
