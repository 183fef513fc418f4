// Command ipcbench is the measurement lab: one subcommand per question
// (rtt, calibrate, ...). Each subcommand lives in its own file and registers
// itself in init(); main only routes.
//
//	ipcbench SUBCOMMAND [flags]
//	   │
//	   ├─ parse flags (bench.Common + the subcommand's own)
//	   ├─ measure (internal/bench/<subcommand>)      ─┐ a child echo side is this
//	   ├─ print a table on stdout, notes on stderr    │ binary re-executed as
//	   └─ --json FILE: bench.Result for `report`      ┘ "ipcbench _echo" (hidden)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/rtt"
)

// command is one subcommand. run gets the arguments after the subcommand
// name and returns an error to print; flag.ErrHelp means usage was shown.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ipcbench SUBCOMMAND [flags]   (ipcbench SUBCOMMAND -h for flags)")
	names := make([]string, 0, len(commands))
	for n := range commands {
		if !strings.HasPrefix(n, "_") { // hidden: child sides re-executed by a subcommand
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == rtt.EchoSubcommand {
		os.Exit(rtt.EchoMain(os.Args[2:]))
	}
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
			usage(os.Stdout)
			return
		}
		fmt.Fprintf(os.Stderr, "ipcbench: unknown subcommand %q\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.run(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "ipcbench %s: %v\n", c.name, err)
		os.Exit(1)
	}
}

// publish is the one envelope writer of every kind: it wraps the kind's
// params, notes and rows in a bench.Result, prints the kind's tables and
// notes, and writes --json (see emit).
func publish(c *bench.Common, kind string, params, rows any, notes []string, tables []bench.TitledTable) error {
	res := bench.NewResult(kind, params)
	res.Rows, res.Notes = rows, notes
	return emit(c, res, tables)
}

// emit prints tables on tableOut and res's notes on stderr, then writes
// --json.
func emit(c *bench.Common, res *bench.Result, tables []bench.TitledTable) error {
	if err := bench.WriteTables(tableOut(c), tables); err != nil {
		return err
	}
	printNotes(res.Notes)
	if c.JSONPath != "" {
		return res.WriteJSON(c.JSONPath)
	}
	return nil
}

// printNotes prints what the reader of a table must know, on stderr.
func printNotes(notes []string) {
	for _, n := range notes {
		fmt.Fprintln(os.Stderr, "note:", n)
	}
}

// tableOut is where tables go: stdout, or stderr when --json - owns
// stdout.
func tableOut(c *bench.Common) io.Writer {
	if c.JSONPath == "-" {
		return os.Stderr
	}
	return os.Stdout
}
