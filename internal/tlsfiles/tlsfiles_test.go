package tlsfiles

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipclab/logagg/internal/testenv"
)

func TestCertPool(t *testing.T) {
	dir := t.TempDir()
	ca := testenv.NewCA(t, dir)
	if pool, err := CertPool(ca.File); err != nil || !pool.Equal(ca.Pool) {
		t.Fatalf("CertPool(the CA) = %v, %v", pool, err)
	}
	notPEM := filepath.Join(dir, "key.txt")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600)
	if _, err := CertPool(notPEM); !errors.Is(err, ErrNoCertificate) {
		t.Errorf("CertPool(no PEM) = %v, want ErrNoCertificate", err)
	}
	if _, err := CertPool(filepath.Join(dir, "missing.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CertPool(missing) = %v, want ErrNotExist", err)
	}
}
