package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// numFacilities are the facilities a PRI can carry (0..23).
const numFacilities = 24

// facilityNames are rsyslog's facility keywords ("security" is its
// deprecated alias of auth).
var facilityNames = map[string]int{
	"kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "security": 4, "syslog": 5, "lpr": 6,
	"news": 7, "uucp": 8, "cron": 9, "authpriv": 10, "ftp": 11, "ntp": 12, "audit": 13, "alert": 14,
	"clock": 15, "local0": 16, "local1": 17, "local2": 18, "local3": 19, "local4": 20, "local5": 21,
	"local6": 22, "local7": 23,
}

// severityNames are the syslog(3) severity keywords, with rsyslog's aliases.
var severityNames = map[string]int{
	"emerg": 0, "panic": 0, "alert": 1, "crit": 2, "err": 3, "error": 3,
	"warning": 4, "warn": 4, "notice": 5, "info": 6, "debug": 7,
}

// levelSeverity maps a JSON record's "level", lower-cased, to a severity:
// the syslog names and what logging libraries write. A switch, not a map:
// every selector over a JSON record asks it, and hashing the name cost
// more than the rest of the rules (BenchmarkDebianRulesJSON).
func levelSeverity(lower string) (int, bool) {
	switch lower {
	case "emerg", "emergency", "panic":
		return 0, true
	case "alert":
		return 1, true
	case "crit", "critical", "fatal":
		return 2, true
	case "err", "error":
		return 3, true
	case "warning", "warn":
		return 4, true
	case "notice":
		return 5, true
	case "info", "information", "informational":
		return 6, true
	case "debug", "trace":
		return 7, true
	}
	return 0, false
}

// Records without a PRI (plain text, JSON) are matched as facility user,
// severity notice, as rsyslog treats input that carries none; a JSON
// record's syslog.facility and syslog.severity, else its known "level",
// give them.
const (
	defaultFacility = 1
	defaultSeverity = 5
)

func facility(name string) (int, error) {
	if n, ok := facilityNames[strings.ToLower(name)]; ok {
		return n, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 0 && n < numFacilities {
		return n, nil
	}
	return 0, fmt.Errorf("%q is no facility (kern, user, mail, daemon, auth, syslog, lpr, news, uucp, cron, authpriv, ftp, ntp, audit, alert, clock, local0..local7, or 0..23)", name)
}

func severity(name string) (int, error) {
	if n, ok := severityNames[strings.ToLower(name)]; ok {
		return n, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 0 && n <= 7 {
		return n, nil
	}
	return 0, fmt.Errorf("%q is no severity (emerg, alert, crit, err, warning, notice, info, debug, or 0..7)", name)
}

// priMask says, per facility, which severities match: bit s of m[f].
type priMask [numFacilities]uint8

func (m *priMask) matches(pri int) bool { return m[pri>>3]&(1<<(pri&7)) != 0 }

// parseSelector reads an rsyslog selector ("*.*;auth,authpriv.none",
// "mail.err", "kern.=warning", "cron.!info") into a mask, exactly as
// rsyslog's legacy filter does: the parts apply left to right; for each
// facility named (or all for '*'), "none" clears it, "=S" adds (with '!':
// removes) severity S alone, "S" adds (with '!': removes) S and every more
// severe one, "*" adds (with '!': removes) all.
func parseSelector(sel string) (priMask, error) {
	var m priMask
	if strings.TrimSpace(sel) == "" {
		return m, fmt.Errorf("empty selector")
	}
	for _, part := range strings.Split(sel, ";") {
		part = strings.TrimSpace(part)
		dot := strings.LastIndexByte(part, '.')
		if dot <= 0 || dot == len(part)-1 {
			return m, fmt.Errorf("%q: want facility.severity", part)
		}
		facs, spec := part[:dot], part[dot+1:]
		negate, single := false, false
		if strings.HasPrefix(spec, "!") {
			negate, spec = true, spec[1:]
		}
		if strings.HasPrefix(spec, "=") {
			single, spec = true, spec[1:]
		}
		var bits uint8
		none := false
		switch spec {
		case "none":
			none = true
		case "*":
			bits = 0xff
		default:
			s, err := severity(spec)
			if err != nil {
				return m, fmt.Errorf("%q: %w", part, err)
			}
			if single {
				bits = 1 << s
			} else {
				bits = uint8(1<<(s+1) - 1) // s and every more severe one
			}
		}
		for _, f := range strings.Split(facs, ",") {
			f = strings.TrimSpace(f)
			lo, hi := 0, numFacilities-1
			if f != "*" {
				n, err := facility(f)
				if err != nil {
					return m, fmt.Errorf("%q: %w", part, err)
				}
				lo, hi = n, n
			}
			for i := lo; i <= hi; i++ {
				switch {
				case none:
					m[i] = 0
				case negate:
					m[i] &^= bits
				default:
					m[i] |= bits
				}
			}
		}
	}
	return m, nil
}

// severityMask reads a severity condition with rsyslog's meaning: "err"
// is err and more severe, "=err" exactly err, "!err" less severe than
// err, "!=err" everything but err, "none" nothing, "*" everything.
func severityMask(spec string) (uint8, error) {
	spec = strings.TrimSpace(spec)
	switch spec {
	case "none":
		return 0, nil
	case "*":
		return 0xff, nil
	}
	negate, single := false, false
	if strings.HasPrefix(spec, "!") {
		negate, spec = true, spec[1:]
	}
	if strings.HasPrefix(spec, "=") {
		single, spec = true, spec[1:]
	}
	s, err := severity(spec)
	if err != nil {
		return 0, err
	}
	bits := uint8(1<<(s+1) - 1)
	if single {
		bits = 1 << s
	}
	if negate {
		bits = ^bits
	}
	return bits, nil
}
