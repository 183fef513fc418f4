package file

import (
	"bytes"
	"regexp"
)

// joinRule decides whether a line continues the record held so far. It
// is called for every line (held says whether a record is held); a preset
// keeps what it needs of the lines before (one rule per file).
type joinRule interface {
	continues(line []byte, held bool) bool
}

// newJoinRule returns the rule of a multiline setting, or nil for none.
func newJoinRule(c *config) joinRule {
	switch {
	case c.mlStart != nil:
		return startRule{c.mlStart}
	case c.multiline == "java":
		return javaRule{}
	case c.multiline == "python":
		return &pythonRule{}
	case c.multiline == "go":
		return &goRule{}
	}
	return nil
}

// startRule: a line matching the pattern starts a record, any other line
// continues the one held (the "halt before" mode of other shippers).
type startRule struct{ re *regexp.Regexp }

func (r startRule) continues(line []byte, held bool) bool { return held && !r.re.Match(line) }

func indented(line []byte) bool { return len(line) > 0 && (line[0] == ' ' || line[0] == '\t') }

// javaRule joins a Java stack trace to the line before it: indented lines
// ("\tat com.x.Y.f(Y.java:10)", "\t... 3 more", "\tSuppressed: …"),
// "Caused by: …", and the exception's own line
// ("java.lang.IllegalStateException: boom", as logback and log4j print it
// under the message) continue the record.
type javaRule struct{}

func (javaRule) continues(line []byte, held bool) bool {
	if !held {
		return false
	}
	return indented(line) || bytes.HasPrefix(line, []byte("Caused by: ")) ||
		bytes.HasPrefix(line, []byte("Suppressed: ")) || javaExceptionLine(line)
}

// javaExceptionLine reports whether line starts with a qualified class
// name ending in Exception, Error or Throwable, followed by ':' or the
// end: "java.lang.IllegalStateException: boom", "com.x.MyError".
func javaExceptionLine(line []byte) bool {
	end := bytes.IndexByte(line, ':')
	if end < 0 {
		end = len(line)
	}
	name := line[:end]
	if bytes.IndexByte(name, '.') < 0 || bytes.ContainsAny(name, " \t") {
		return false
	}
	return bytes.HasSuffix(name, []byte("Exception")) || bytes.HasSuffix(name, []byte("Error")) ||
		bytes.HasSuffix(name, []byte("Throwable"))
}

// pythonRule: "Traceback (most recent call last):" starts a record; its
// indented lines ("  File …", "    code"), the exception line that ends
// it ("ValueError: bad"), and chained tracebacks ("During handling of the
// above exception, another exception occurred:", "The above exception was
// the direct cause of the following exception:", then another
// "Traceback …") continue it.
type pythonRule struct {
	inTrace  bool // inside the frames of a traceback
	afterExc bool // right after a traceback's exception line
}

var (
	pyTraceback = []byte("Traceback (most recent call last):")
	pyDuring    = []byte("During handling of the above exception")
	pyDirect    = []byte("The above exception was the direct cause")
)

func (r *pythonRule) continues(line []byte, held bool) bool {
	chained := bytes.HasPrefix(line, pyDuring) || bytes.HasPrefix(line, pyDirect)
	switch {
	case bytes.HasPrefix(line, pyTraceback):
		wasChained := r.afterExc
		r.inTrace, r.afterExc = true, false
		return held && wasChained
	case r.inTrace && indented(line):
		return held
	case r.inTrace && chained, r.afterExc && chained:
		r.inTrace, r.afterExc = false, true
		return held
	case r.inTrace:
		r.inTrace, r.afterExc = false, true // the exception line ends the traceback
		return held
	}
	r.afterExc = false
	return false
}

// goRule: "panic: …" or "fatal error: …" starts a record; the goroutine
// headers ("goroutine 1 [running]:"), frames ("main.main()" and the
// indented "\t/src/main.go:5 +0x1d" under each), "created by …",
// "[signal …", "runtime stack:" and the "exit status 2" a go run prints
// continue it.
type goRule struct{ inPanic bool }

func (r *goRule) continues(line []byte, held bool) bool {
	if bytes.HasPrefix(line, []byte("panic: ")) || bytes.HasPrefix(line, []byte("fatal error: ")) {
		r.inPanic = true
		return false
	}
	if !r.inPanic {
		return false
	}
	switch {
	case indented(line), bytes.HasPrefix(line, []byte("goroutine ")), bytes.HasPrefix(line, []byte("created by ")),
		bytes.HasPrefix(line, []byte("[signal ")), bytes.HasPrefix(line, []byte("runtime stack:")), goFrame(line):
		return held
	case bytes.HasPrefix(line, []byte("exit status ")):
		r.inPanic = false
		return held
	}
	r.inPanic = false
	return false
}

// goFrame reports whether line is a function line of a Go stack trace:
// "main.main()", "main.(*T).f(0xc000012345, 0x2)", "panic({0x4a, 0x5})".
func goFrame(line []byte) bool {
	open := bytes.IndexByte(line, '(')
	return open > 0 && line[len(line)-1] == ')' && !bytes.ContainsAny(line[:open], " \t:")
}
