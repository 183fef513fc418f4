// Package cref embeds the C reference programs that ipcbench compares Go
// against (src/pingpong.c for `rtt`, src/calibrate.c for `calibrate`) and
// builds them with the system C compiler on first use. The sources live in
// src/ because the go tool refuses .c files in a package that does not use
// cgo; they are plain C and can be built by hand: gcc -O2 -o pp src/pingpong.c
//
// Binaries are cached under CacheDir, named by a hash of the source and the
// compiler flags, so an edited source (a new ipcbench binary) gets a fresh
// build and concurrent ipcbench runs never see a half-written binary (each
// build goes to a temporary name and is renamed into place).
//
// Build is safe for concurrent use.
package cref

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

//go:embed src/pingpong.c
var pingpongSrc []byte

//go:embed src/calibrate.c
var calibrateSrc []byte

// Program names accepted by Build.
const (
	PingPong  = "pingpong"
	Calibrate = "calibrate"
)

// ErrNoCompiler is returned (wrapped) when no C compiler can be found.
var ErrNoCompiler = errors.New("no C compiler (set CC or install gcc)")

// ErrUnknownProgram is returned for a name Build does not know.
var ErrUnknownProgram = errors.New("unknown C reference program")

var cflags = []string{"-O2", "-Wall"}

// Source returns the embedded C source of a program.
func Source(name string) ([]byte, error) {
	switch name {
	case PingPong:
		return pingpongSrc, nil
	case Calibrate:
		return calibrateSrc, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownProgram, name)
}

// CacheDir is where built programs go: $IPCBENCH_CACHE, else
// $XDG_CACHE_HOME/ipcbench, else ~/.cache/ipcbench, else ./.cache/ipcbench.
func CacheDir() string {
	if d := os.Getenv("IPCBENCH_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "ipcbench")
	}
	return filepath.Join(".cache", "ipcbench")
}

// Build returns the path of the compiled program, compiling it with $CC
// (default gcc) if the cache has no binary for this exact source.
func Build(name string) (string, error) {
	src, err := Source(name)
	if err != nil {
		return "", err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	h := sha256.New()
	h.Write(src)
	fmt.Fprint(h, cc, cflags)
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	dir := CacheDir()
	bin := filepath.Join(dir, name+"-"+sum)
	if st, err := os.Stat(bin); err == nil && st.Mode()&0o111 != 0 {
		return bin, nil
	}
	ccPath, err := exec.LookPath(cc)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", name, ErrNoCompiler)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	tmp := bin + ".tmp" + strconv.Itoa(os.Getpid())
	srcPath := tmp + ".c"
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	defer os.Remove(srcPath)
	args := append(append([]string{}, cflags...), "-o", tmp, srcPath)
	if out, err := exec.Command(ccPath, args...).CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("build %s: %s %v: %w\n%s", name, cc, args, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	return bin, nil
}
