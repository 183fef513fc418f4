package otlp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ipclab/logagg/internal/otlpwire"
)

// exporter sends one encoded ExportLogsServiceRequest and says what came
// of it. Safe for concurrent use.
type exporter interface {
	export(ctx context.Context, req []byte) outcome
	close() error
}

// outcome is what an export came to.
type outcome struct {
	err error // nil: accepted, possibly in part
	// rejected records and the server's message (partial success).
	rejected int64
	msg      string
	// split: the server refuses this request as it is (too large, or
	// invalid): it is sent again in halves, and a single record it keeps
	// refusing is given up, counted (records_rejected_total).
	split bool
	// delay the server asked for (RetryInfo, Retry-After); 0: back off.
	delay time.Duration
	wire  int // bytes sent
}

func newExporter(c Config) (exporter, error) {
	target, https, err := c.target()
	if err != nil {
		return nil, err
	}
	tc, err := c.tlsConfig(https)
	if err != nil {
		return nil, err
	}
	if c.Protocol == ProtocolHTTP {
		tr := &http.Transport{
			TLSClientConfig:     tc,
			MaxIdleConnsPerHost: c.Concurrency,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}
		return &httpExporter{url: target, cfg: c, client: &http.Client{Transport: tr, Timeout: c.Timeout}}, nil
	}
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(otlpwire.Codec{})))
	if err != nil {
		return nil, fmt.Errorf("otlp forwarder: %w", err)
	}
	g := &grpcExporter{conn: conn, cfg: c}
	if len(c.Headers) > 0 {
		g.md = metadata.New(c.Headers)
	}
	if c.Compression != "none" {
		g.callOpts = append(g.callOpts, grpc.UseCompressor(c.Compression))
	}
	return g, nil
}

type grpcExporter struct {
	conn     *grpc.ClientConn
	cfg      Config
	md       metadata.MD
	callOpts []grpc.CallOption
}

func (g *grpcExporter) close() error { return g.conn.Close() }

func (g *grpcExporter) export(ctx context.Context, req []byte) outcome {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	if g.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, g.md)
	}
	var resp otlpwire.Raw
	err := g.conn.Invoke(ctx, otlpwire.ExportPath, &otlpwire.Raw{B: req}, &resp, g.callOpts...)
	out := outcome{wire: len(req)}
	if err == nil {
		out.rejected, out.msg, out.err = otlpwire.ParseResponse(resp.B)
		return out
	}
	out.err = err
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			out.delay = ri.RetryDelay.AsDuration()
		}
	}
	switch st.Code() {
	case codes.InvalidArgument:
		out.split = true
	case codes.ResourceExhausted:
		// Retryable only with RetryInfo (OTLP's rule); without, the
		// request itself is too large.
		out.split = out.delay == 0
	}
	return out
}

type httpExporter struct {
	url    string
	cfg    Config
	client *http.Client
	bufs   sync.Pool
}

func (h *httpExporter) close() error {
	h.client.CloseIdleConnections()
	return nil
}

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

func (h *httpExporter) export(ctx context.Context, req []byte) outcome {
	body := req
	var bp *bytes.Buffer
	if h.cfg.Compression != "none" {
		bp, _ = h.bufs.Get().(*bytes.Buffer)
		if bp == nil {
			bp = new(bytes.Buffer)
		}
		bp.Reset()
		defer h.bufs.Put(bp)
		switch h.cfg.Compression {
		case "gzip":
			zw := gzipWriters.Get().(*gzip.Writer)
			zw.Reset(bp)
			zw.Write(req) //nolint:errcheck // a bytes.Buffer does not fail
			zw.Close()
			gzipWriters.Put(zw)
		case "zstd":
			zw := otlpwire.ZstdEncoder(bp)
			zw.Write(req) //nolint:errcheck
			zw.Close()
			otlpwire.PutZstdEncoder(zw)
		}
		body = bp.Bytes()
	}
	out := outcome{wire: len(body)}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		out.err = err
		return out
	}
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	if h.cfg.Compression != "none" {
		hreq.Header.Set("Content-Encoding", h.cfg.Compression)
	}
	for k, v := range h.cfg.Headers {
		hreq.Header.Set(k, v)
	}
	resp, err := h.client.Do(hreq)
	if err != nil {
		out.err = err
		return out
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusOK {
		if err != nil {
			out.err = err
			return out
		}
		out.rejected, out.msg, out.err = otlpwire.ParseResponse(rb)
		return out
	}
	out.err = fmt.Errorf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(bytes.ToValidUTF8(rb[:min(len(rb), 200)], nil))))
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		out.split = true
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		out.delay = retryAfter(resp.Header.Get("Retry-After"))
	}
	return out
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}
