// Command srslog sends messages with github.com/RackSec/srslog, the syslog
// package of Docker's syslog log driver and of many Go programs, for the
// corpus capture (../capture.py):
//
//	srslog NETWORK ADDR FORMAT FRAMER TAG < messages.jsonl
//
// one message per line of stdin as a JSON string. FORMAT is default
// (srslog's DefaultFormatter: "<PRI> RFC3339 HOST TAG[PID]: MSG"), unix,
// rfc3164 or rfc5424 (its other formatters); FRAMER is default (none but
// the newline srslog ends every message with) or octet (RFC 5425 octet
// counting).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/RackSec/srslog"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: srslog NETWORK ADDR FORMAT FRAMER TAG < messages.jsonl")
		os.Exit(2)
	}
	formats := map[string]srslog.Formatter{"default": srslog.DefaultFormatter, "unix": srslog.UnixFormatter,
		"rfc3164": srslog.RFC3164Formatter, "rfc5424": srslog.RFC5424Formatter}
	framers := map[string]srslog.Framer{"default": srslog.DefaultFramer, "octet": srslog.RFC5425MessageLengthFramer}
	format, ok1 := formats[os.Args[3]]
	framer, ok2 := framers[os.Args[4]]
	if !ok1 || !ok2 {
		fmt.Fprintln(os.Stderr, "srslog: unknown format or framer")
		os.Exit(2)
	}
	w, err := srslog.Dial(os.Args[1], os.Args[2], srslog.LOG_INFO|srslog.LOG_DAEMON, os.Args[5])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w.SetFormatter(format)
	w.SetFramer(framer)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var msg string
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := w.Info(msg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := w.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
