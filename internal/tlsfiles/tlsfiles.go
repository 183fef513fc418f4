// Package tlsfiles reads the PEM files that TLS settings name: one place
// for the forwarders' and the receivers' CA files.
package tlsfiles

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrNoCertificate is wrapped when a CA file holds no PEM certificate.
var ErrNoCertificate = errors.New("holds no PEM certificate")

// CertPool reads the PEM CA certificates in path.
func CertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %w", path, ErrNoCertificate)
	}
	return pool, nil
}
