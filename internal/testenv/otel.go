package testenv

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Collector is the OpenTelemetry Collector scripts/setup.sh builds from
// contrib/otelcol ($LOGAGG_OTELCOL overrides). Without it the test skips
// outside CI and fails in CI.
func Collector(t testing.TB) string {
	t.Helper()
	p := os.Getenv("LOGAGG_OTELCOL")
	if p == "" {
		p = filepath.Join(RepoRoot(t), ".cache", "tools", "otelcol-logagg")
	}
	if _, err := os.Stat(p); err != nil {
		SkipOrFail(t, "the test OpenTelemetry Collector is not built (scripts/setup.sh builds it into .cache/tools/otelcol-logagg)")
	}
	return p
}

// OTelPython is the Python interpreter of the venv scripts/setup.sh fills
// with OpenTelemetry's SDK and OTLP exporters ($LOGAGG_OTEL_PYTHON
// overrides). Without it the test skips outside CI and fails in CI.
func OTelPython(t testing.TB) string {
	t.Helper()
	p := os.Getenv("LOGAGG_OTEL_PYTHON")
	if p == "" {
		cache := os.Getenv("LOGAGG_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "logagg")
		}
		p = filepath.Join(cache, "otel-venv", "bin", "python")
	}
	if _, err := os.Stat(p); err != nil {
		SkipOrFail(t, "OpenTelemetry's Python SDK is not installed (scripts/setup.sh makes the venv "+filepath.Dir(filepath.Dir(p))+")")
	}
	return p
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago (for
// programs that must be told their port before they start).
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// CollectorProcess is a running OpenTelemetry Collector.
type CollectorProcess struct {
	Cmd *exec.Cmd
	Log string // its stderr
}

// StartCollector runs the test Collector with config (YAML) until the test
// ends, and waits until ready accepts TCP connections.
func StartCollector(t testing.TB, config, ready string) *CollectorProcess {
	t.Helper()
	bin := Collector(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &CollectorProcess{Log: filepath.Join(dir, "collector.log")}
	logf, err := os.Create(c.Log)
	if err != nil {
		t.Fatal(err)
	}
	c.Cmd = exec.Command(bin, "--config", cfg)
	c.Cmd.Stdout, c.Cmd.Stderr = logf, logf
	if err := c.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	t.Cleanup(c.Stop)
	if _, ok := Until(60*time.Second, func() (struct{}, bool) {
		nc, err := net.Dial("tcp", ready)
		if err == nil {
			nc.Close()
		}
		return struct{}{}, err == nil
	}); !ok {
		b, _ := os.ReadFile(c.Log)
		t.Fatalf("the Collector does not listen on %s after 60s:\n%s", ready, b)
	}
	return c
}

// Stop ends the Collector (SIGTERM, then SIGKILL after 10 s) and waits for it.
func (c *CollectorProcess) Stop() {
	if c.Cmd.Process == nil || c.Cmd.ProcessState != nil {
		return
	}
	c.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.Cmd.Process.Kill()
		<-done
	}
}
