package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	otlpfwd "github.com/ipclab/logagg/internal/forward/otlp"
)

func TestForwardOTLP(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(p, []byte(`listen: [otlp://127.0.0.1:4317]
outputs: {app: {path: /tmp/app.jsonl}}
forward:
  otlp:
    endpoint: https://collector.example:4318
    protocol: http/protobuf
    output: app
    headers: {Authorization: Bearer s3cret}
    tls: {ca_file: /etc/ssl/ca.pem}
`), 0o600)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	o := c.OTLPConfig()
	if o.From != "/tmp/app.jsonl" || o.DrainTimeout != 10*time.Second || o.Headers["Authorization"] != "Bearer s3cret" || o.Protocol != otlpfwd.ProtocolHTTP {
		t.Errorf("%+v", o)
	}
	c.Forward.OTLP.Protocol = "thrift"
	var fe *FieldError
	if err := c.Validate(); !errors.As(err, &fe) || fe.Field != "forward.otlp" || !strings.Contains(err.Error(), "protocol") {
		t.Errorf("bad protocol: %v", err)
	}
	c.Forward.OTLP.Protocol, c.Forward.OTLP.Output = "", "nosuch"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "forward.otlp.output") {
		t.Errorf("unknown output: %v", err)
	}
	// A flag turns it on.
	c = Default()
	if err := Lookup("forward-otlp").Set(&c, "127.0.0.1:4317"); err != nil || c.OTLPConfig() == nil || c.OTLPConfig().Endpoint != "127.0.0.1:4317" {
		t.Errorf("--forward-otlp: %v %+v", err, c.Forward.OTLP)
	}
}
