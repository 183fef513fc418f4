// Package rules decides what happens to each record: which outputs it goes
// to, whether it is dropped or rate-limited, and which of its fields are
// set, removed, renamed or redacted. Operators write rules in the
// configuration (Spec, an ordered list); Compile turns them into a Set once,
// at start-up and at every reload, and the sink evaluates the Set for every
// record (Set.Eval) without allocating.
//
// The match language is plain YAML (docs/rules.md, ADR 0049): rsyslog's
// selectors ("auth,authpriv.*", "*.*;auth,authpriv.none") with their exact
// meaning, facility and severity by name or number, app name, hostname,
// msgid, the message (contains, prefix, regular expression), transport,
// listener, format, flags, the sender's pid/uid/gid as the kernel gave
// them, and any member of a producer's JSON object by path ("http.status":
// ">= 500"), combined with all / any / not.
//
// A rule that cannot apply to a record (a field missing, a value of another
// type, a plain-text record for a field match) does not match it: no record
// is lost or failed by a rule. Regular expressions are Go's (RE2): linear in
// the text, whatever the pattern.
//
// # Concurrency
//
// A Set is immutable and safe for concurrent use, but for its rate limiters,
// which lock per shard. Eval takes a Scratch that belongs to one goroutine.
package rules

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Spec is one rule as configured.
type Spec struct {
	// Name identifies the rule in metrics, logs and errors (default:
	// "rule-N", its position from 1).
	Name string `yaml:"name"`
	// Match selects the records the rule applies to (nil: every record).
	Match *Match `yaml:"match"`
	// Route sends matching records to these outputs (added to what earlier
	// rules chose).
	Route []string `yaml:"route"`
	// Drop discards matching records (counted); later rules do not see
	// them.
	Drop bool `yaml:"drop"`
	// Stop ends the evaluation for matching records: later rules do not
	// see them.
	Stop bool `yaml:"stop"`
	// RateLimit limits matching records per key; records over the limit
	// are dropped (counted).
	RateLimit *RateLimit `yaml:"rate_limit"`
	// Edits of the record's fields, applied in this order: set, remove,
	// rename, redact.
	Set    Assignments       `yaml:"set"`
	Remove []string          `yaml:"remove"`
	Rename map[string]string `yaml:"rename"`
	Redact []Redaction       `yaml:"redact"`
}

// Match is a condition; every condition given must hold (an implicit all).
type Match struct {
	// Selector is an rsyslog selector: "mail.err", "*.*;auth,authpriv.none",
	// "kern.=warning", "cron.!info".
	Selector string `yaml:"selector"`
	// Facility is one or more facilities by name or number.
	Facility Strings `yaml:"facility"`
	// Severity is a severity with rsyslog's meaning: "err" is err and more
	// severe, "=err" exactly err, "!err" less severe than err, "none"
	// nothing; by name or number.
	Severity string `yaml:"severity"`

	App      Strings `yaml:"app"`      // app name (syslog APP-NAME/programname; a JSON record's "source"), any of
	Hostname Strings `yaml:"hostname"` // syslog HOSTNAME, any of
	MsgID    Strings `yaml:"msgid"`    // RFC 5424 MSGID, any of

	Message *Text `yaml:"message"`
	// Tag matches the whole RFC 3164 TAG as received (rsyslog's
	// syslogtag: "dockerd/3f2a1b9c[1234]:"), e.g. a container's name.
	Tag *Text `yaml:"tag"`

	// File matches the path of the file a record was read from
	// (agg.file, file inputs).
	File *Text `yaml:"file"`

	Transport Strings `yaml:"transport"` // agg.transport: unix, unixgram, tcp, udp, fifo, shm, mq, stdin, exec
	Listener  Strings `yaml:"listener"`  // agg.listener, the listen URL
	Format    Strings `yaml:"format"`    // agg.format: json, raw, rfc3164, rfc5424
	Flag      Strings `yaml:"flag"`      // the record carries any of these flags (agg.flags)

	// PID, UID and GID are the sender's, as the kernel gave them
	// (agg.peer): "0", "1000", ">= 1000", "!= 0". A record without
	// credentials does not match.
	PID string `yaml:"pid"`
	UID string `yaml:"uid"`
	GID string `yaml:"gid"`

	// Fields match members of a producer's JSON object by path:
	// {"http.status": ">= 500", "user.id": "== \"42\"", "trace": "exists"}.
	// Operators: == != < <= > >= (numbers, or strings compared as text),
	// contains, prefix, regex, exists, missing. A value is a JSON number,
	// a quoted string, true, false or null.
	Fields map[string]string `yaml:"fields"`

	All []*Match `yaml:"all"`
	Any []*Match `yaml:"any"`
	Not *Match   `yaml:"not"`
}

// Text matches the message: every condition given must hold.
type Text struct {
	Contains string `yaml:"contains"`
	Prefix   string `yaml:"prefix"`
	Regex    string `yaml:"regex"`
}

// RateLimit allows Burst records per Interval for each value of Key. When
// a key's records come again after some were dropped, one record says how
// many were suppressed, and from whom (as rsyslog's imuxsock and journald
// do).
type RateLimit struct {
	// Key is what records are counted by: pid (the default), uid, gid,
	// app, hostname, listener, transport, or field:PATH.
	Key      string        `yaml:"key"`
	Interval time.Duration `yaml:"interval"` // default 5s
	Burst    int           `yaml:"burst"`    // default 200
	// Keys bounds the keys remembered (default 4096): a flood of new pids
	// evicts the oldest instead of growing memory.
	Keys int `yaml:"keys"`
}

// Redaction replaces what Regex matches in Field (default "message") by
// Mask (default "***").
type Redaction struct {
	Field string `yaml:"field"`
	Regex string `yaml:"regex"`
	Mask  string `yaml:"mask"`
}

// Assignment sets a top-level member (or an existing nested one) to a
// value.
type Assignment struct {
	Path  string
	Value any // string, number, bool or nil, as YAML gave it
}

// Assignments keep the order of the YAML mapping they came from.
type Assignments []Assignment

// UnmarshalYAML reads a mapping of paths to values, in order.
func (a *Assignments) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: set wants a mapping of field: value", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		var v any
		if err := n.Content[i+1].Decode(&v); err != nil {
			return err
		}
		*a = append(*a, Assignment{Path: n.Content[i].Value, Value: v})
	}
	return nil
}

// Strings is one string or a list of them.
type Strings []string

// UnmarshalYAML accepts a scalar or a sequence.
func (s *Strings) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = Strings{n.Value}
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*s = l
	return nil
}

func (s Strings) String() string { return strings.Join(s, ",") }
