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

// tableOut is where tables go: stdout, or stderr when --json - owns stdout.
func tableOut(c *bench.Common) io.Writer {
	if c.JSONPath == "-" {
		return os.Stderr
	}
	return os.Stdout
}

// finish prints a subcommand's table and notes and writes --json. With
// --json - the JSON owns stdout and the table goes to stderr.
func finish(c *bench.Common, res *bench.Result, t *bench.Table) error {
	return finishTables(c, res, []bench.TitledTable{{Table: t}})
}

// finishTables is finish for a kind with several tables (ADR 0037's
// Tables): each is printed under its title.
func finishTables(c *bench.Common, res *bench.Result, tables []bench.TitledTable) error {
	out := tableOut(c)
	for i, t := range tables {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if t.Title != "" {
			fmt.Fprintln(out, t.Title+":")
		}
		if _, err := t.Table.WriteTo(out); err != nil {
			return err
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintln(os.Stderr, "note:", n)
	}
	if c.JSONPath != "" {
		return res.WriteJSON(c.JSONPath)
	}
	return nil
}
