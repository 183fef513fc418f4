package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheBadField(t *testing.T) {
	for _, tc := range []struct {
		field string
		mut   func(*Config)
	}{
		{"listen", func(c *Config) { c.Listen = nil }},
		{"listen[0]", func(c *Config) { c.Listen = []string{"/tmp/x.sock"} }},
		{"listen[1]", func(c *Config) { c.Listen = []string{"unix:///a", "unix:///a"} }},
		{"output.path", func(c *Config) { c.Output.Path = "" }},
		{"output.fsync", func(c *Config) { c.Output.Fsync = "sometimes" }},
		{"output.max_files", func(c *Config) { c.Output.MaxFiles = -1 }},
		{"metrics", func(c *Config) { c.Metrics = "9100" }},
		{"limits.max_record", func(c *Config) { c.Limits.MaxRecord = 1 }},
		{"limits.read_coalesce", func(c *Config) { c.Limits.ReadCoalesce = time.Second }},
		{"sockets.mode", func(c *Config) { c.Sockets.Mode = "rw-rw----" }},
		{"sockets.group", func(c *Config) { c.Sockets.Group = "no-such-group-xyz" }},
		{"queue.batches", func(c *Config) { c.Queue.Batches = -1 }},
		{"limits.memory", func(c *Config) { c.Limits.Memory = 1 << 20 }},
		{"queue.batch_bytes", func(c *Config) { c.Queue.BatchBytes = 10 }},
		{"drain_timeout", func(c *Config) { c.DrainTimeout = 0 }},
		{"log_level", func(c *Config) { c.LogLevel = "loud" }},
	} {
		c := Default()
		c.Listen = []string{"unix:///tmp/ok.sock"}
		tc.mut(&c)
		err := c.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: Validate() = %v, want a FieldError", tc.field, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: error %q does not name the field", tc.field, err)
		}
	}
	c := Default()
	c.Listen = []string{"unix:///tmp/ok.sock"}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestLoadYAML(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	os.WriteFile(p, []byte(`
listen: [unix:///tmp/a.sock, "udp://127.0.0.1:5514"]
output: {path: /var/log/x.jsonl, max_size: 64MiB, max_files: 3, fsync: batch, direct_io: false}
limits: {max_record: 1KiB, max_conns: 5, idle_timeout: 30s}
sockets: {mode: "0600", rcvbuf: 8MiB}
drain_timeout: 2s
`), 0o644)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Listen) != 2 || c.Output.MaxSize != 64<<20 || c.Output.Fsync != "batch" || c.Output.DirectIO || !Default().Output.DirectIO || c.Limits.MaxRecord != 1024 ||
		c.Limits.IdleTimeout != 30*time.Second || c.Sockets.RcvBuf != 8<<20 || c.DrainTimeout != 2*time.Second ||
		c.Queue.Batches != Default().Queue.Batches {
		t.Fatalf("loaded %+v", c)
	}
	os.WriteFile(p, []byte("outptu: {path: x}\n"), 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "outptu") {
		t.Fatalf("unknown key: err = %v, want it named", err)
	}
	os.WriteFile(p, []byte(""), 0o644)
	if c, err := Load(p); err != nil || c.Output.Path != Default().Output.Path {
		t.Fatalf("empty file: %v %+v", err, c)
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"512": 512, "64KiB": 64 << 10, "4MiB": 4 << 20, "1GB": 1e9, "1.5K": 1536, "10 MB": 10e6, "64kb": 64000, "64k": 64 << 10} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1", "5XB", "1.5"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", bad)
		}
	}
	if s := ByteSize(256 << 10).String(); s != "256KiB" {
		t.Errorf("String = %s", s)
	}
}
