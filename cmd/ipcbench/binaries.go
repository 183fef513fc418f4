package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// siblingBinary finds one of this repository's commands: next to the
// ipcbench executable (make build puts them all in bin/), else on PATH.
func siblingBinary(name string) (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("cannot find the %s binary next to ipcbench or on PATH (run make build)", name)
}

// workloadBinaries finds the aggregator and producer binaries every
// workload runs.
func workloadBinaries() (aggregator, producer string, err error) {
	if aggregator, err = siblingBinary("aggregator"); err != nil {
		return "", "", err
	}
	if producer, err = siblingBinary("producer"); err != nil {
		return "", "", err
	}
	return aggregator, producer, nil
}
