package main

// aggregator tap: watch the records flowing through a running daemon.
//
//	aggregator tap --control /run/logagg/control.sock [--match 'app: sshd'] [--count N]
//
//	daemon's sink ──copies──► control socket ──► tap ──► stdout (JSON lines)
//
// The daemon serves the control socket when its configuration says where
// (control: PATH, --control); only its user and root may connect. A slow
// tap loses its own copies, never the pipeline's records.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/ipclab/logagg/internal/control"
)

const tapUsage = `usage: aggregator tap --control PATH [--match YAML] [--count N]

Prints the records flowing through the daemon serving the control socket
PATH, as written (after the rules' edits), one JSON line each, until
interrupted. --match selects records with the rules' match language
(docs/rules.md), e.g. --match 'app: sshd' or --match '{severity: err}'.
`

func tapCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("aggregator tap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("control", "", "the daemon's control socket `PATH` (its control setting)")
	match := fs.String("match", "", "only records this `YAML` match selects (the rules' match language)")
	count := fs.Int("count", 0, "exit after `N` records (0: run until interrupted)")
	fs.Usage = func() { fmt.Fprint(stderr, tapUsage+"\nflags:\n"); fs.PrintDefaults() }
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := tap(ctx, *path, *match, *count, stdout); err != nil {
		fmt.Fprintln(stderr, "aggregator tap:", err)
		return 1
	}
	return 0
}

// tap streams the records from the control socket at path to out.
func tap(ctx context.Context, path, match string, count int, out io.Writer) error {
	c, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	context.AfterFunc(ctx, func() { c.Close() })
	req, _ := json.Marshal(control.Request{Tap: &control.TapRequest{Match: match}})
	if _, err := c.Write(append(req, '\n')); err != nil {
		return err
	}
	r := bufio.NewReaderSize(c, 1<<20)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("no answer from %s: %w", path, err)
	}
	var rep control.Reply
	if err := json.Unmarshal(line, &rep); err != nil || !rep.OK {
		if rep.Error != "" {
			return errors.New(rep.Error)
		}
		return fmt.Errorf("unexpected answer %q", line)
	}
	w := bufio.NewWriter(out)
	defer w.Flush()
	for n := 0; count == 0 || n < count; {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			w.Write(line)
			if r.Buffered() == 0 {
				w.Flush()
			}
			n++
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
	return nil
}
