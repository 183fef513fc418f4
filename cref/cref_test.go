package cref

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/testenv"
)

func TestBuildAndCache(t *testing.T) {
	testenv.RequireCommand(t, "gcc")
	t.Setenv("IPCBENCH_CACHE", t.TempDir())
	bin, err := Build(Calibrate)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	bin2, err := Build(Calibrate)
	if err != nil || bin2 != bin {
		t.Fatalf("second build: %q %v", bin2, err)
	}
	st2, _ := os.Stat(bin2)
	if !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatal("cached binary was rebuilt")
	}
	out, err := exec.Command(bin, "5").Output()
	if err != nil || !strings.Contains(string(out), `"tsc_per_ns"`) {
		t.Fatalf("run calibrate: %v %s", err, out)
	}
	if _, err := Build("nope"); !errors.Is(err, ErrUnknownProgram) {
		t.Fatalf("unknown program: %v", err)
	}
}
