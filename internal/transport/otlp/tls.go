package otlp

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/ipclab/logagg/internal/tlsfiles"
)

// serverTLS is a receiver's TLS (tls_cert, tls_key, tls_client_ca): its
// certificate, read again when either file changes so that a renewed
// certificate needs no restart, and for mutual TLS the CAs whose client
// certificates it accepts.
type serverTLS struct {
	certFile, keyFile string
	clientCAs         *x509.CertPool // nil: no client certificate asked for

	mu              sync.Mutex
	cert            *tls.Certificate
	certMod, keyMod time.Time
}

// newServerTLS loads p's certificate and client CAs; nil when p asks for
// no TLS.
func newServerTLS(p Params) (*serverTLS, error) {
	if p.TLSCert == "" {
		return nil, nil
	}
	s := &serverTLS{certFile: p.TLSCert, keyFile: p.TLSKey}
	if _, err := s.certificate(); err != nil {
		return nil, err
	}
	if p.TLSClientCA != "" {
		var err error
		if s.clientCAs, err = tlsfiles.CertPool(p.TLSClientCA); err != nil {
			return nil, fmt.Errorf("tls_client_ca: %w", err)
		}
	}
	return s, nil
}

// config is the server side's tls.Config.
func (s *serverTLS) config() *tls.Config {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.certificate() },
	}
	if s.clientCAs != nil {
		c.ClientCAs = s.clientCAs
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// certificate is the key pair, read again when either file's modification
// time changed. While the pair does not load (a renewal half written, a
// key that does not match yet) the last good one is served, and the files
// are tried again at the next handshake.
func (s *serverTLS) certificate() (*tls.Certificate, error) {
	cs, cerr := os.Stat(s.certFile)
	ks, kerr := os.Stat(s.keyFile)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert != nil && (cerr != nil || kerr != nil || cs.ModTime().Equal(s.certMod) && ks.ModTime().Equal(s.keyMod)) {
		return s.cert, nil
	}
	c, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		if s.cert != nil {
			return s.cert, nil
		}
		return nil, fmt.Errorf("tls_cert, tls_key: %w", err)
	}
	s.cert = &c
	if cerr == nil && kerr == nil {
		s.certMod, s.keyMod = cs.ModTime(), ks.ModTime()
	}
	return s.cert, nil
}

// countedCreds counts the gRPC handshakes that fail (CauseTLS): a client
// without a certificate the CAs accept, or one speaking plain text.
type countedCreds struct {
	credentials.TransportCredentials
	r *receiver
}

func (c countedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	nc, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.r.refuse(CauseTLS)
	}
	return nc, info, err
}

func (c countedCreds) Clone() credentials.TransportCredentials {
	return countedCreds{c.TransportCredentials.Clone(), c.r}
}

// serverLog is the HTTP server's error log: net/http reports a failed TLS
// handshake only there, so that line is counted (CauseTLS) on its way to
// the debug log.
type serverLog struct{ l *Listener }

func (w serverLog) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("TLS handshake error")) {
		w.l.r.refuse(CauseTLS)
	}
	w.l.d.Log.Debug(string(bytes.TrimSpace(p)), "listener", w.l.url)
	return len(p), nil
}
