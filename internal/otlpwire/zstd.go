package otlpwire

import (
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/encoding"
)

// The Collector's exporters may compress with zstd; gRPC knows only gzip
// by itself, so zstd is registered here (gRPC requires registration in an
// init function).
func init() { encoding.RegisterCompressor(zstdCompressor{}) }

// ZstdName is the grpc-encoding (and HTTP Content-Encoding) of zstd.
const ZstdName = "zstd"

var (
	zstdEncoders = sync.Pool{New: func() any {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
		return e
	}}
	zstdDecoders = sync.Pool{New: func() any {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(8<<20))
		return d
	}}
)

// ZstdDecoder returns a pooled decoder reading r; Put it back with
// PutZstdDecoder. Its window is bounded (8 MiB), so a hostile frame cannot
// make it allocate more.
func ZstdDecoder(r io.Reader) (*zstd.Decoder, error) {
	d := zstdDecoders.Get().(*zstd.Decoder)
	if err := d.Reset(r); err != nil {
		zstdDecoders.Put(d)
		return nil, err
	}
	return d, nil
}

// PutZstdDecoder returns d to the pool.
func PutZstdDecoder(d *zstd.Decoder) {
	d.Reset(nil) //nolint:errcheck // a nil reader only releases the previous one
	zstdDecoders.Put(d)
}

// ZstdEncoder returns a pooled encoder writing to w.
func ZstdEncoder(w io.Writer) *zstd.Encoder {
	e := zstdEncoders.Get().(*zstd.Encoder)
	e.Reset(w)
	return e
}

// PutZstdEncoder returns e to the pool (after Close).
func PutZstdEncoder(e *zstd.Encoder) { zstdEncoders.Put(e) }

type zstdCompressor struct{}

func (zstdCompressor) Name() string { return ZstdName }

func (zstdCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return &zstdWriter{ZstdEncoder(w)}, nil
}

type zstdWriter struct{ e *zstd.Encoder }

func (w *zstdWriter) Write(p []byte) (int, error) { return w.e.Write(p) }

func (w *zstdWriter) Close() error {
	err := w.e.Close()
	PutZstdEncoder(w.e)
	return err
}

func (zstdCompressor) Decompress(r io.Reader) (io.Reader, error) {
	d, err := ZstdDecoder(r)
	if err != nil {
		return nil, err
	}
	return &zstdReader{d: d}, nil
}

// zstdReader gives its decoder back at the end of the stream.
type zstdReader struct{ d *zstd.Decoder }

func (r *zstdReader) Read(p []byte) (int, error) {
	if r.d == nil {
		return 0, io.EOF
	}
	n, err := r.d.Read(p)
	if err != nil {
		PutZstdDecoder(r.d)
		r.d = nil
	}
	return n, err
}
