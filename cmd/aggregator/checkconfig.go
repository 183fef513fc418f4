package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/transport"
)

// checkConfigCommand is `aggregator check-config FILE`, like rsyslogd -N1:
// it reads and validates FILE without binding or opening anything, and
// exits 0 when it is valid, 1 with every problem (each naming its field,
// e.g. "output.fsync: …", or the YAML line) when it is not, and 2 on a
// usage error. ExecReload= runs it before SIGHUP, so `systemctl reload`
// refuses a broken file instead of a daemon logging that it kept the old one.
//
// With --print it also writes every setting's value as the daemon would
// run with it (the file over the defaults), one "key: value" line each.
func checkConfigCommand(args []string, stdout, stderr io.Writer) int {
	print := len(args) == 2 && args[0] == "--print"
	if print {
		args = args[1:]
	}
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		fmt.Fprintln(stderr, "usage: aggregator check-config [--print] FILE")
		return 2
	}
	path := args[0]
	cfg, err := config.Load(path)
	if err == nil {
		err = checkConfig(cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "aggregator: %s is not valid:\n%v\n", path, err)
		return 1
	}
	fmt.Fprintf(stdout, "aggregator: %s is valid\n", path)
	if print {
		for _, s := range config.Settings {
			if s.Key != "" && (!s.Kafka || cfg.Forward.Kafka != nil) && (!s.OTLP || cfg.Forward.OTLP != nil) {
				fmt.Fprintf(stdout, "%s: %s\n", s.Key, s.Value(cfg))
			}
		}
	}
	return 0
}

// checkConfig is config.Validate plus what needs the registered
// transports: every listen URL's scheme must be one of them, and its
// parameters what the transport accepts (for those that can say so
// without opening anything).
func checkConfig(cfg config.Config) error {
	errs := []error{cfg.Validate()}
	known := map[string]bool{}
	for _, s := range transport.Schemes() {
		known[s] = true
	}
	for i, l := range cfg.Listen {
		u, err := url.Parse(l)
		if err != nil || u.Scheme == "" {
			continue // Validate reported it
		}
		if known[u.Scheme] {
			if err := transport.Check(u, int(cfg.Limits.MaxRecord)); err != nil {
				errs = append(errs, &config.FieldError{Field: fmt.Sprintf("listen[%d]", i), Err: err})
			}
			continue
		}
		errs = append(errs, &config.FieldError{Field: fmt.Sprintf("listen[%d]", i),
			Err: fmt.Errorf("%q: %w %q (known: %v)", l, transport.ErrUnknownScheme, u.Scheme, transport.Schemes())})
	}
	return errors.Join(errs...)
}
