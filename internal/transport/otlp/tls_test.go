package otlp_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"google.golang.org/grpc/credentials"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/otlp"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// tlsURL is a receiver URL on a free loopback port with TLS from server,
// and mutual TLS when clientCA is set.
func tlsURL(scheme string, server testenv.PKI, clientCA string) string {
	q := url.Values{"tls_cert": {server.CertFile}, "tls_key": {server.KeyFile}}
	if clientCA != "" {
		q.Set("tls_client_ca", clientCA)
	}
	return scheme + "://127.0.0.1:0?" + q.Encode()
}

// exporterTLS is the Go SDK's exporter of the receiver at raw (gRPC or
// HTTP by its scheme) with the client side's TLS config.
func exporterTLS(ctx context.Context, raw string, tc *tls.Config) (sdklog.Exporter, error) {
	if strings.HasPrefix(raw, otlp.SchemeHTTP+"://") {
		return otlploghttp.New(ctx, otlploghttp.WithEndpoint(hostPort(raw)), otlploghttp.WithTLSClientConfig(tc),
			otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: false}))
	}
	return otlploggrpc.New(ctx, otlploggrpc.WithEndpoint(hostPort(raw)), otlploggrpc.WithTLSCredentials(credentials.NewTLS(tc)),
		otlploggrpc.WithRetry(otlploggrpc.RetryConfig{Enabled: false}))
}

// refusedTLS is the receiver's count of failed handshakes.
func (e *env) refusedTLS() float64 {
	return testutil.ToFloat64(e.m.RequestsRefused.WithLabelValues(e.l.URL(), otlp.CauseTLS))
}

// TestReceiverTLS: the Go SDK's gRPC and HTTP exporters deliver over TLS
// and over mutual TLS with a client certificate of the CA; a client
// without one, and a client speaking plain text, are refused at the
// handshake and counted, and nothing of theirs is recorded.
func TestReceiverTLS(t *testing.T) {
	server, client := testenv.NewPKI(t, t.TempDir())
	for _, scheme := range []string{otlp.SchemeGRPC, otlp.SchemeHTTP} {
		t.Run(scheme, func(t *testing.T) {
			ctx := context.Background()
			trusting := &tls.Config{RootCAs: server.CA, MinVersion: tls.VersionTLS12}

			e := startEnv(t, tlsURL(scheme, server, ""), options())
			if err := sendTLS(ctx, e.l.URL(), trusting, 500, "tls"); err != nil {
				t.Fatalf("export over TLS: %v", err)
			}
			recs := e.lines(500)
			checkMapped(t, recs[0], scheme)
			if peer, _ := recs[0]["agg"].(map[string]any)["peer"].(map[string]any); peer == nil || peer["pid"] != float64(os.Getpid()) {
				t.Errorf("agg.peer = %v, want our pid %d (the loopback lookup, under TLS too)", peer, os.Getpid())
			}

			m := startEnv(t, tlsURL(scheme, server, client.CAFile), options())
			withCert := trusting.Clone()
			withCert.Certificates = []tls.Certificate{client.Cert}
			if err := sendTLS(ctx, m.l.URL(), withCert, 300, "mtls"); err != nil {
				t.Fatalf("export over mutual TLS: %v", err)
			}
			m.lines(300)
			if err := sendTLS(ctx, m.l.URL(), trusting, 50, "nocert"); err == nil {
				t.Fatalf("a client without a certificate was served under mutual TLS")
			}
			testenv.Eventually(t, 10*time.Second, "the refused handshake counted", func() bool { return m.refusedTLS() >= 1 })
			plain, err := exporterPlain(ctx, m.l.URL())
			if err != nil {
				t.Fatal(err)
			}
			lp := provider(plain)
			emit(lp, 50, "plain")
			if err := lp.Shutdown(ctx); err == nil {
				t.Fatalf("a plain-text client was served by a TLS receiver")
			}
			testenv.Eventually(t, 10*time.Second, "the plain-text client counted", func() bool { return m.refusedTLS() >= 2 })
			if n := m.cap.Len(); n != 300 {
				t.Fatalf("%d records after the refused clients, want the 300 of the client with a certificate", n)
			}
		})
	}
}

func exporterPlain(ctx context.Context, raw string) (sdklog.Exporter, error) {
	if strings.HasPrefix(raw, otlp.SchemeHTTP+"://") {
		return otlploghttp.New(ctx, otlploghttp.WithEndpoint(hostPort(raw)), otlploghttp.WithInsecure(),
			otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: false}))
	}
	return otlploggrpc.New(ctx, otlploggrpc.WithEndpoint(hostPort(raw)), otlploggrpc.WithInsecure(),
		otlploggrpc.WithRetry(otlploggrpc.RetryConfig{Enabled: false}))
}

// TestReceiverTLSRenewal: a certificate renewed in place (new files under
// the same names) is served from the next handshake on, without a
// restart; a renewal half written (a key that does not match the
// certificate) keeps the last good pair in service.
func TestReceiverTLSRenewal(t *testing.T) {
	dir := t.TempDir()
	ca := testenv.NewCA(t, dir)
	first := ca.Issue(t, "server", x509.ExtKeyUsageServerAuth, 10)
	e := startEnv(t, tlsURL(otlp.SchemeHTTP, first, ""), options())
	serial := func() (int64, error) {
		c, err := tls.Dial("tcp", hostPort(e.l.URL()), &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
	}
	if s, err := serial(); err != nil || s != 10 {
		t.Fatalf("serial %d, %v; want 10", s, err)
	}
	// Half a renewal: a new certificate beside the old key.
	key, _ := os.ReadFile(first.KeyFile)
	renewed := ca.Issue(t, "server", x509.ExtKeyUsageServerAuth, 11)
	newKey, _ := os.ReadFile(renewed.KeyFile)
	if err := os.WriteFile(renewed.KeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Second)
	os.Chtimes(renewed.CertFile, later, later)
	if s, err := serial(); err != nil || s != 10 {
		t.Fatalf("during a half-written renewal: serial %d, %v; want the last good pair's 10", s, err)
	}
	// The renewal completed.
	if err := os.WriteFile(renewed.KeyFile, newKey, 0o600); err != nil {
		t.Fatal(err)
	}
	later = later.Add(2 * time.Second)
	os.Chtimes(renewed.KeyFile, later, later)
	if s, err := serial(); err != nil || s != 11 {
		t.Fatalf("after the renewal: serial %d, %v; want 11", s, err)
	}
}

// TestReceiverTLSBadParams: check-config and Open refuse what cannot
// serve TLS, naming the parameter.
func TestReceiverTLSBadParams(t *testing.T) {
	server, _ := testenv.NewPKI(t, t.TempDir())
	cases := map[string]string{
		"otlp://127.0.0.1:0?tls_cert=" + server.CertFile:                                                                           "tls_cert and tls_key go together",
		"otlp://127.0.0.1:0?tls_client_ca=" + server.CAFile:                                                                        "tls_client_ca needs tls_cert",
		"otlphttp://127.0.0.1:0?tls_cert=/nonexistent&tls_key=" + server.KeyFile:                                                   "tls_cert, tls_key",
		fmt.Sprintf("otlp://127.0.0.1:0?tls_cert=%s&tls_key=%s&tls_client_ca=%s", server.CertFile, server.KeyFile, server.KeyFile): "tls_client_ca: " + server.KeyFile + " holds no PEM certificate",
	}
	for raw, want := range cases {
		u, _ := url.Parse(raw)
		if err := otlp.CheckURL(u); err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, transport.ErrBadAddress) {
			t.Errorf("CheckURL(%s) = %v, want a bad address saying %q", raw, err, want)
		}
		deps := transport.Deps{Root: metrics.New(nil), Sink: sink.New(transporttest.NewCapture(), sink.Options{HardStop: context.Background(), BatchBytes: 16 << 10}), Opts: options()}
		if _, err := transport.Open(raw, deps); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s) = %v, want %q", raw, err, want)
		}
	}
}

// TestReceiverTLSSlowHandshake: a client that connects and never starts
// its handshake is cut off after the URL's timeout and counted, on both
// receivers; the receiver serves others meanwhile.
func TestReceiverTLSSlowHandshake(t *testing.T) {
	server, _ := testenv.NewPKI(t, t.TempDir())
	for _, scheme := range []string{otlp.SchemeGRPC, otlp.SchemeHTTP} {
		t.Run(scheme, func(t *testing.T) {
			e := startEnv(t, tlsURL(scheme, server, "")+"&timeout=1s", options())
			silent, err := net.Dial("tcp", hostPort(e.l.URL()))
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			start := time.Now()
			if err := sendTLS(context.Background(), e.l.URL(), &tls.Config{RootCAs: server.CA, MinVersion: tls.VersionTLS12}, 100, "tls"); err != nil {
				t.Fatalf("another client, while one stalls its handshake: %v", err)
			}
			e.lines(100)
			silent.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := silent.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the silent connection was not closed within 10s (read: %v)", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the silent connection lasted %v, want about the 1s timeout", d)
			}
			testenv.Eventually(t, 10*time.Second, "the stalled handshake counted", func() bool { return e.refusedTLS() >= 1 })
		})
	}
}

// sendTLS exports n records (prefix 000000, ...) through the Go SDK over
// TLS and flushes.
func sendTLS(ctx context.Context, raw string, tc *tls.Config, n int, prefix string) error {
	exp, err := exporterTLS(ctx, raw, tc)
	if err != nil {
		return err
	}
	lp := provider(exp)
	emit(lp, n, prefix)
	return lp.Shutdown(ctx)
}
