// Package bpftrace ships the lab's bpftrace scripts inside the Go binaries,
// so that `ipcbench trace` works from any directory. Each script is also a
// standalone tool: `bpftrace NAME.bt PID` (PID 0 traces every process); see
// README.md for what each one answers.
package bpftrace

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.bt
var scripts embed.FS

// Names lists the shipped scripts, without the ".bt" suffix, sorted.
func Names() []string {
	entries, err := fs.ReadDir(scripts, ".")
	if err != nil {
		return nil // cannot happen for an embed.FS root
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".bt"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Source returns the text of the shipped script NAME (with or without ".bt").
func Source(name string) ([]byte, error) {
	name = strings.TrimSuffix(name, ".bt")
	b, err := scripts.ReadFile(name + ".bt")
	if err != nil {
		return nil, fmt.Errorf("bpftrace: no shipped script %q (have %s): %w", name, strings.Join(Names(), ", "), fs.ErrNotExist)
	}
	return b, nil
}

// Header returns the script's first-line description, "name - what it answers".
func Header(name string) (string, error) {
	src, err := Source(name)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(src), "\n")
	return strings.TrimSpace(strings.TrimPrefix(line, "//")), nil
}
