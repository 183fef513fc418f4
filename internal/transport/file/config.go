package file

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/transport"
)

// format is how a file's lines are read.
type format uint8

const (
	formatAuto   format = iota // decided per file from its first line
	formatPlain                // one line is one record
	formatDocker               // Docker's json-file driver: {"log":…,"stream":…,"time":…}
	formatCRI                  // the CRI log format of containerd and CRI-O: TIME STREAM P|F CONTENT
)

var formatNames = map[string]format{"auto": formatAuto, "plain": formatPlain, "docker": formatDocker, "cri": formatCRI}

// config is a file:// URL's settings, with their defaults. It is pure
// data: parseURL does no I/O.
type config struct {
	pattern string // absolute path, possibly a glob
	glob    bool   // pattern has glob metacharacters

	fromStart bool   // from=start: a file seen the first time is read from its start
	format    format // format=

	multiline    string         // preset name (java, python, go) or "" for none / a custom start
	mlStart      *regexp.Regexp // multiline_start=REGEX
	mlMaxLines   int            // multiline_max_lines=
	mlTimeout    time.Duration  // multiline_timeout=
	partialAfter time.Duration  // partial_timeout=: an unterminated last line waits this long

	maxOpen       int           // max_open=: files open at once
	watch         string        // "inotify" or "poll"
	scan          time.Duration // scan=: glob rescan and size poll interval
	rotateWait    time.Duration // rotate_wait=: a file rotated away or deleted stays open this long after its last byte
	checkpointGap time.Duration // checkpoint_interval=
	maxRecord     int           // from the listener options
}

// Defaults, documented in docs/transports.md.
const (
	defaultMLMaxLines    = 500
	defaultMLTimeout     = time.Second
	defaultPartialAfter  = 5 * time.Second
	defaultMaxOpen       = 256
	defaultScanInotify   = 5 * time.Second
	defaultScanPoll      = 250 * time.Millisecond
	defaultRotateWait    = 5 * time.Second
	defaultCheckpointGap = time.Second
)

// parseURL validates u (file:///path or file:///dir/*.log?param=…) and
// returns its settings. Every error wraps transport.ErrBadAddress and
// names the bad part.
func parseURL(u *url.URL, maxRecord int) (*config, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", transport.ErrBadAddress, u.Redacted(), fmt.Sprintf(format, a...))
	}
	if u.Host != "" {
		return nil, bad("file:// needs an absolute path after it, e.g. file:///var/log/app.log (host %q given)", u.Host)
	}
	p := u.Path
	if p == "" {
		p = u.Opaque
	}
	if p == "" || !filepath.IsAbs(p) {
		return nil, bad("file:// needs an absolute path, e.g. file:///var/log/nginx/*.log")
	}
	if strings.HasSuffix(p, "/") {
		return nil, bad("path %q names a directory; give a file or a glob such as %s*.log", p, p)
	}
	c := &config{
		pattern: filepath.Clean(p), mlMaxLines: defaultMLMaxLines, mlTimeout: defaultMLTimeout,
		partialAfter: defaultPartialAfter, maxOpen: defaultMaxOpen, watch: "inotify",
		rotateWait: defaultRotateWait, checkpointGap: defaultCheckpointGap, maxRecord: maxRecord,
	}
	if c.maxRecord <= 0 {
		c.maxRecord = transport.DefaultOptions().MaxRecord
	}
	c.glob = strings.ContainsAny(c.pattern, `*?[\`)
	if _, err := filepath.Match(c.pattern, ""); err != nil {
		return nil, bad("glob %q: %v", c.pattern, err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, bad("query: %v", err)
	}
	dur := func(k string, dst *time.Duration, min time.Duration) error {
		d, err := time.ParseDuration(q.Get(k))
		if err != nil || d < min {
			return bad("%s=%q: want a duration of at least %v", k, q.Get(k), min)
		}
		*dst = d
		return nil
	}
	num := func(k string, dst *int, min, max int) error {
		n, err := strconv.Atoi(q.Get(k))
		if err != nil || n < min || n > max {
			return bad("%s=%q: want a whole number from %d to %d", k, q.Get(k), min, max)
		}
		*dst = n
		return nil
	}
	scanSet := false
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, bad("%s given %d times", k, len(vs))
		}
		v := vs[0]
		var err error
		switch k {
		case "from":
			switch v {
			case "end":
			case "start":
				c.fromStart = true
			default:
				err = bad("from=%q: want start or end", v)
			}
		case "format":
			f, ok := formatNames[v]
			if !ok {
				err = bad("format=%q: want auto, plain, docker or cri", v)
			}
			c.format = f
		case "multiline":
			switch v {
			case "java", "python", "go":
				c.multiline = v
			default:
				err = bad("multiline=%q: want java, python or go (or multiline_start=REGEX)", v)
			}
		case "multiline_start":
			c.mlStart, err = regexp.Compile(v)
			if err != nil {
				err = bad("multiline_start=%q: %v", v, err)
			}
		case "multiline_max_lines":
			err = num(k, &c.mlMaxLines, 2, 100000)
		case "multiline_timeout":
			err = dur(k, &c.mlTimeout, time.Millisecond)
		case "partial_timeout":
			err = dur(k, &c.partialAfter, time.Millisecond)
		case "max_open":
			err = num(k, &c.maxOpen, 1, 1<<20)
		case "watch":
			if v != "inotify" && v != "poll" {
				err = bad("watch=%q: want inotify or poll", v)
			}
			c.watch = v
		case "scan":
			err = dur(k, &c.scan, 10*time.Millisecond)
			scanSet = true
		case "rotate_wait":
			err = dur(k, &c.rotateWait, 0)
		case "checkpoint_interval":
			err = dur(k, &c.checkpointGap, 10*time.Millisecond)
		default:
			err = bad("unknown parameter %q (known: from, format, multiline, multiline_start, multiline_max_lines, "+
				"multiline_timeout, partial_timeout, max_open, watch, scan, rotate_wait, checkpoint_interval)", k)
		}
		if err != nil {
			return nil, err
		}
	}
	if c.multiline != "" && c.mlStart != nil {
		return nil, bad("multiline and multiline_start exclude each other")
	}
	if !scanSet {
		c.scan = defaultScanInotify
		if c.watch == "poll" {
			c.scan = defaultScanPoll
		}
	}
	return c, nil
}

// canonical is the URL the listener is known by: the scheme, the cleaned
// path and the parameters in a fixed order, so that the same input
// written two ways keeps one checkpoint and one set of metrics.
func canonical(u *url.URL) string {
	p := u.Path
	if p == "" {
		p = u.Opaque
	}
	// The path unescaped: a glob's '*' reads as itself in metrics labels
	// and agg.listener.
	s := "file://" + filepath.Clean(p)
	if u.RawQuery != "" {
		q, _ := url.ParseQuery(u.RawQuery)
		s += "?" + q.Encode()
	}
	return s
}
