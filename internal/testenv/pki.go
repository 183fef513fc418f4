package testenv

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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority whose certificate is a PEM file.
type CA struct {
	File string         // the CA certificate, PEM
	Pool *x509.CertPool // holding it
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// PKI is a certificate and key signed by a CA, as PEM files and loaded.
type PKI struct {
	CAFile, CertFile, KeyFile string
	CA                        *x509.CertPool
	Cert                      tls.Certificate
	Serial                    int64
}

// NewCA makes a CA valid for an hour, its certificate in dir.
func NewCA(t testing.TB, dir string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "logagg test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{File: filepath.Join(dir, "ca.pem"), Pool: x509.NewCertPool(), dir: dir, cert: cert, key: key}
	ca.Pool.AddCert(cert)
	writeFile(t, ca.File, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return ca
}

// Issue signs a certificate for name (with IP 127.0.0.1 and the name
// localhost) for usage, and writes it and its key to dir/name.pem and
// dir/name.key, replacing what was there.
func (ca *CA) Issue(t testing.TB, name string, usage x509.ExtKeyUsage, serial int64) PKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	p := PKI{CAFile: ca.File, CA: ca.Pool, CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+".key"), Serial: serial}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	writeFile(t, p.CertFile, certPEM)
	writeFile(t, p.KeyFile, keyPEM)
	if p.Cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return p
}

// NewPKI makes a CA in dir and a server certificate (serial 2) and a
// client certificate (serial 3) of it.
func NewPKI(t testing.TB, dir string) (server, client PKI) {
	t.Helper()
	ca := NewCA(t, dir)
	return ca.Issue(t, "server", x509.ExtKeyUsageServerAuth, 2), ca.Issue(t, "client", x509.ExtKeyUsageClientAuth, 3)
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
