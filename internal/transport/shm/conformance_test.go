package shm

import (
	"io"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipclab/logagg/internal/shmring"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// ringConn adapts a Writer to the suite's io.WriteCloser: one Write, one frame.
type ringConn struct{ w *shmring.Writer }

func (c ringConn) Write(p []byte) (int, error) {
	if err := c.w.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}
func (c ringConn) Close() error { return c.w.Close() }

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Case{
		Name:      "shm",
		Transport: "shm",
		NewURL: func(t testing.TB) string {
			dir, err := os.MkdirTemp("", "lg")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			return "shm://" + filepath.Join(dir, "c.sock") + "?size=256KiB"
		},
		Dial: func(raw string) (io.WriteCloser, error) {
			u, err := url.Parse(raw)
			if err != nil {
				return nil, err
			}
			path, _, err := ParseURL(u)
			if err != nil {
				return nil, err
			}
			w, err := shmring.Dial(path)
			if err != nil {
				return nil, err
			}
			return ringConn{w}, nil
		},
		Stream:    true, // backpressure, nothing lost
		Creds:     true,
		PathBased: true,
	})
}
