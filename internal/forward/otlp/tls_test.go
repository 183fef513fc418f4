package otlp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ipclab/logagg/internal/otlpwire"
)

// pki is a CA and a certificate and key signed by it, as PEM files.
type pki struct {
	caFile, certFile, keyFile string
	ca                        *x509.CertPool
	cert                      tls.Certificate
}

// newPKI makes a CA in dir and one certificate of it for each name
// ("server" with IP 127.0.0.1, "client").
func newPKI(t *testing.T, dir string) (server, client pki) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "logagg test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600)
	issue := func(name string, usage x509.ExtKeyUsage, n int64) pki {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		p := pki{caFile: caFile, ca: pool, certFile: filepath.Join(dir, name+".pem"), keyFile: filepath.Join(dir, name+".key")}
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
		os.WriteFile(p.certFile, certPEM, 0o600)
		os.WriteFile(p.keyFile, keyPEM, 0o600)
		p.cert, _ = tls.X509KeyPair(certPEM, keyPEM)
		return p
	}
	return issue("server", x509.ExtKeyUsageServerAuth, 2), issue("client", x509.ExtKeyUsageClientAuth, 3)
}

// TestForwardMutualTLS: over gRPC and HTTP, to an endpoint that requires
// a client certificate of its CA.
func TestForwardMutualTLS(t *testing.T) {
	server, client := newPKI(t, t.TempDir())
	serverTLS := &tls.Config{Certificates: []tls.Certificate{server.cert}, ClientCAs: server.ca, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	var lines []string
	for i := range 500 {
		lines = append(lines, line(i))
	}
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			fe := &fakeEndpoint{}
			var ep string
			if proto == ProtocolGRPC {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS)), grpc.ForceServerCodecV2(otlpwire.Codec{}))
				registerFake(srv, fe)
				go srv.Serve(ln)
				t.Cleanup(srv.Stop)
				ep = ln.Addr().String()
			} else {
				srv := httptest.NewUnstartedServer(http.HandlerFunc(fe.handleHTTP))
				srv.TLS = serverTLS
				srv.StartTLS()
				t.Cleanup(srv.Close)
				ep = srv.URL // https://127.0.0.1:PORT
			}
			path := filepath.Join(t.TempDir(), "out.jsonl")
			writeLog(t, path, lines)
			_, st := run(t, Config{Endpoint: ep, Protocol: proto, From: path,
				TLS: TLS{Enable: true, CAFile: client.caFile, CertFile: client.certFile, KeyFile: client.keyFile}})
			if got := len(fe.got()); got != 500 || st.Exported != 500 {
				t.Errorf("%d records at the endpoint, %d exported; want 500", got, st.Exported)
			}
		})
	}
}
