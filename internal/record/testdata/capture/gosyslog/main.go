// Command gosyslog sends messages with Go's log/syslog, for the corpus
// capture (../capture.py): gosyslog NETWORK ADDR, one message per line of
// stdin as a JSON string.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/syslog"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gosyslog NETWORK ADDR < messages.jsonl")
		os.Exit(2)
	}
	w, err := syslog.Dial(os.Args[1], os.Args[2], syslog.LOG_INFO|syslog.LOG_DAEMON, "goapp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
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
