package otlp

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ipclab/logagg/internal/otlpwire"
	"github.com/ipclab/logagg/internal/testenv"
)

// TestForwardMutualTLS: over gRPC and HTTP, to an endpoint that requires
// a client certificate of its CA.
func TestForwardMutualTLS(t *testing.T) {
	server, client := testenv.NewPKI(t, t.TempDir())
	serverTLS := &tls.Config{Certificates: []tls.Certificate{server.Cert}, ClientCAs: server.CA, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
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
				TLS: TLS{Enable: true, CAFile: client.CAFile, CertFile: client.CertFile, KeyFile: client.KeyFile}})
			if got := len(fe.got()); got != 500 || st.Exported != 500 {
				t.Errorf("%d records at the endpoint, %d exported; want 500", got, st.Exported)
			}
		})
	}
}
