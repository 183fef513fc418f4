package otlp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ipclab/logagg/internal/bufpool"
	"github.com/ipclab/logagg/internal/jsonstr"
	"github.com/ipclab/logagg/internal/otlpwire"
)

type connKey struct{}

// What one HTTP/2 connection may hold (HTTP2ConnCost): its window, the
// smallest HTTP/2 allows, and its calls' handlers, each a goroutine
// waiting for room in max_inflight before it reads the body.
const (
	h2ConnWindow = 64 << 10
	h2Streams    = 8
	h2StreamCost = 8 << 10
)

// serveHTTP serves OTLP/HTTP (POST /v1/logs, protobuf or JSON, gzip, zstd
// or no compression) until ctx ends.
func (l *Listener) serveHTTP(ctx context.Context) error {
	g := &gate{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if !g.enter() {
				l.r.refuse(CauseStopping)
				l.httpError(w, false, http.StatusServiceUnavailable, &refusal{CauseStopping, "logagg: shutting down; retry"})
				return
			}
			defer g.leave()
			l.serveRequest(w, req)
		}),
		ReadHeaderTimeout: l.p.Timeout,
		IdleTimeout:       l.d.Opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			if pc, ok := c.(*peerConn); ok {
				return context.WithValue(ctx, connKey{}, pc.addr.info)
			}
			return ctx
		},
		ErrorLog: log.New(serverLog{l}, "", 0),
	}
	var ln net.Listener = l.ln
	if l.tls != nil {
		// HTTP/2 and HTTP/1.1, as ServeTLS would offer; the handshake is
		// bounded by ReadHeaderTimeout. Over HTTP/2 a client's calls
		// bring data before their handlers read it, and each runs a
		// handler: net/http's defaults (1 MiB of window and 250 calls a
		// connection) are bounded to what HTTP2ConnCost charges.
		cfg := l.tls.config()
		cfg.NextProtos = []string{"h2", "http/1.1"}
		ln = tls.NewListener(l.ln, cfg)
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: h2Streams,
			MaxReceiveBufferPerConnection: h2ConnWindow, MaxReceiveBufferPerStream: h2ConnWindow}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		srv.Close()
		g.wait()
		l.r.releaseEmitters()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), l.d.Opts.DrainGrace)
	srv.Shutdown(sctx) //nolint:errcheck // past the grace, Close ends what is left
	cancel()
	srv.Close()
	<-errc
	g.wait() // handlers still handing over records (until the hard stop at worst)
	l.r.releaseEmitters()
	return nil
}

// gate counts the handlers running and, once closed, admits no more.
type gate struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   *sync.Cond
}

func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

func (g *gate) leave() {
	g.mu.Lock()
	g.n--
	if g.n == 0 && g.idle != nil {
		g.idle.Broadcast()
	}
	g.mu.Unlock()
}

func (g *gate) wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.idle == nil {
		g.idle = sync.NewCond(&g.mu)
	}
	for g.n > 0 {
		g.idle.Wait()
	}
}

var errTooLarge = errors.New("request body too large")

// serveRequest serves one HTTP request.
func (l *Listener) serveRequest(w http.ResponseWriter, req *http.Request) {
	info, _ := req.Context().Value(connKey{}).(*connInfo)
	if info == nil {
		info = l.ln.anonymous()
	}
	if req.URL.Path != otlpwire.HTTPPath {
		l.r.refuse(CauseMethod)
		l.httpError(w, false, http.StatusNotFound, &refusal{CauseMethod, "logagg serves OTLP logs at POST " + otlpwire.HTTPPath})
		return
	}
	if req.Method != http.MethodPost {
		l.r.refuse(CauseMethod)
		w.Header().Set("Allow", http.MethodPost)
		l.httpError(w, false, http.StatusMethodNotAllowed, &refusal{CauseMethod, "logagg: use POST"})
		return
	}
	isJSON := false
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	switch mt {
	case "application/x-protobuf", "application/protobuf":
	case "application/json":
		isJSON = true
	default:
		l.r.refuse(CauseContentType)
		l.httpError(w, false, http.StatusUnsupportedMediaType,
			&refusal{CauseContentType, fmt.Sprintf("logagg: Content-Type %q: want application/x-protobuf or application/json", req.Header.Get("Content-Type"))})
		return
	}
	enc := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding")))
	switch enc {
	case "", "identity", "gzip", otlpwire.ZstdName:
	default:
		l.r.refuse(CauseEncoding)
		l.httpError(w, isJSON, http.StatusUnsupportedMediaType, &refusal{CauseEncoding, fmt.Sprintf("logagg: Content-Encoding %q: want gzip, zstd or none", enc)})
		return
	}
	if req.ContentLength > int64(l.p.MaxRequest) {
		l.tooLarge(w, isJSON)
		return
	}
	// The body's room in max_inflight, before it is read: its length
	// when sent uncompressed, else the most it may decompress to.
	held := l.p.MaxRequest
	if (enc == "" || enc == "identity") && req.ContentLength >= 0 {
		held = int(req.ContentLength)
	}
	if ref := l.r.admit(req.Context(), held); ref != nil {
		l.httpError(w, isJSON, http.StatusTooManyRequests, ref)
		return
	}
	ingested := false
	defer func() {
		if !ingested {
			l.r.unadmit(held)
		}
	}()
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(l.p.Timeout)) //nolint:errcheck // unsupported only on hijacked or HTTP/2 bodies
	// The body's buffer is of its size class (receiver.bodies), so a
	// small request never holds a big buffer a big one left: what bodies
	// hold is at most twice their room in max_inflight.
	body := l.r.bodies.Get(min(held+1, firstRead))
	defer func() { l.r.bodies.Put(body) }()
	body, wire, err := l.readBody(req.Body, enc, body)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, errTooLarge):
			l.tooLarge(w, isJSON)
		case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
			l.r.refuse(CauseTimeout)
			w.Header().Set("Connection", "close")
			l.httpError(w, isJSON, http.StatusRequestTimeout, &refusal{CauseTimeout, fmt.Sprintf("logagg: the request was not received within %v", l.p.Timeout)})
		case errors.Is(err, errDecompress):
			l.r.refuse(CauseEncoding)
			l.httpError(w, isJSON, http.StatusBadRequest, &refusal{CauseEncoding, "logagg: " + err.Error()})
		default: // the client went away
			l.r.refuse(CauseCancelled)
		}
		return
	}
	rc.SetReadDeadline(time.Time{}) //nolint:errcheck
	// The request as protobuf; body stays the pool's buffer, to give back.
	pbReq := body
	if isJSON {
		pb, err := jsonToProto(body)
		if err != nil {
			cause := CauseMalformed
			var de *DecodeError
			if errors.As(err, &de) {
				cause = de.Cause
			}
			l.r.refuse(cause)
			l.httpError(w, true, http.StatusBadRequest, &refusal{cause, "logagg: " + err.Error()})
			return
		}
		pbReq = pb
	}
	ingested = true
	res, ref := l.r.ingest(req.Context(), pbReq, wire, info, held)
	if ref != nil {
		code := http.StatusBadRequest
		switch ref.cause {
		case CauseBackpressure:
			code = http.StatusTooManyRequests
		case CauseStopping:
			code = http.StatusServiceUnavailable
		case CauseNotWritten:
			code = http.StatusGatewayTimeout
		}
		l.httpError(w, isJSON, code, ref)
		return
	}
	if isJSON {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(jsonResponse(res)) //nolint:errcheck // the client's loss
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
	w.Write(otlpwire.AppendResponse(nil, int64(res.rejected), res.msg)) //nolint:errcheck
}

func (l *Listener) tooLarge(w http.ResponseWriter, isJSON bool) {
	l.r.refuse(CauseTooLarge)
	w.Header().Set("Connection", "close")
	l.httpError(w, isJSON, http.StatusRequestEntityTooLarge, &refusal{CauseTooLarge, fmt.Sprintf("logagg: a request body is at most %d bytes (max_request)", l.p.MaxRequest)})
}

var errDecompress = errors.New("body does not decompress")

// readBody reads the body into buf, decompressed, refusing more than
// MaxRequest bytes either side of the decompression; wire is the bytes
// read from the connection.
func (l *Listener) readBody(r io.Reader, enc string, buf []byte) (body []byte, wire int, err error) {
	cr := &countingReader{r: r}
	src := io.Reader(io.LimitReader(cr, int64(l.p.MaxRequest)+1))
	switch enc {
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			if cr.n > l.p.MaxRequest {
				return buf, cr.n, errTooLarge
			}
			if isReadErr(err) {
				return buf, cr.n, err
			}
			return buf, cr.n, fmt.Errorf("%w: gzip: %w", errDecompress, err)
		}
		defer zr.Close()
		src = zr
	case otlpwire.ZstdName:
		zr, err := otlpwire.ZstdDecoder(src)
		if err != nil {
			return buf, cr.n, fmt.Errorf("%w: zstd: %w", errDecompress, err)
		}
		defer otlpwire.PutZstdDecoder(zr)
		src = zr
	}
	body, err = readAll(src, buf, l.p.MaxRequest, l.r.bodies)
	if cr.n > l.p.MaxRequest {
		return body, cr.n, errTooLarge
	}
	if err != nil && enc != "" && enc != "identity" && !errors.Is(err, errTooLarge) && !isReadErr(err) {
		err = fmt.Errorf("%w: %s: %w", errDecompress, enc, err)
	}
	return body, cr.n, err
}

// isReadErr tells an error of the connection (a timeout, a reset) from one
// of the data.
func isReadErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, os.ErrDeadlineExceeded)
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// firstRead is the buffer a body of unknown size starts with.
const firstRead = 64 << 10

// readAll reads r to its end into buf, which pool lent and which it grows
// by doubling (the smaller buffer goes back to pool); more than most bytes
// is errTooLarge.
func readAll(r io.Reader, buf []byte, most int, pool *bufpool.Bounded) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			nb := append(pool.Get(max(2*cap(buf), 4<<10)), buf...)
			pool.Put(buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > most {
			return buf, errTooLarge
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// httpError answers a refused request: the status, Retry-After where the
// client should try again, and a google.rpc.Status body in the request's
// encoding, as OTLP/HTTP asks.
func (l *Listener) httpError(w http.ResponseWriter, isJSON bool, code int, r *refusal) {
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	}
	gc := codes.InvalidArgument
	switch code {
	case http.StatusTooManyRequests, http.StatusRequestEntityTooLarge:
		gc = codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		gc = codes.Unavailable
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		gc = codes.DeadlineExceeded
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		gc = codes.Unimplemented
	}
	if isJSON {
		b := append([]byte(`{"code":`), strconv.Itoa(int(gc))...)
		b = append(b, `,"message":"`...)
		b, _ = jsonstr.AppendEscaped(b, []byte(r.msg))
		b = append(b, `"}`...)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		w.Write(b) //nolint:errcheck
		return
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(gc))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, r.msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(code)
	w.Write(b) //nolint:errcheck
}

// jsonResponse is an ExportLogsServiceResponse in OTLP/JSON.
func jsonResponse(res result) []byte {
	if res.rejected == 0 && res.msg == "" {
		return []byte("{}")
	}
	b := []byte(`{"partialSuccess":{"rejectedLogRecords":"`)
	b = strconv.AppendInt(b, int64(res.rejected), 10)
	b = append(b, `","errorMessage":"`...)
	b, _ = jsonstr.AppendEscaped(b, []byte(res.msg))
	return append(b, `"}}`...)
}

// maxJSONDepth bounds the nesting of an OTLP/JSON body before it is
// parsed: a request is eight levels deep around its values, which nest at
// most MaxDepth levels of two (an AnyValue and its array or kvlist).
const maxJSONDepth = 8 + 2*DefaultMaxDepth + 8

// jsonToProto turns an OTLP/JSON request into protobuf, which the decoder
// then reads as it reads any request: one mapping for both encodings.
func jsonToProto(body []byte) ([]byte, error) {
	if !utf8.Valid(body) {
		return nil, &DecodeError{Cause: CauseInvalidUTF8, Msg: "the JSON body is not UTF-8"}
	}
	if jsonDepth(body) > maxJSONDepth {
		return nil, &DecodeError{Cause: CauseTooDeep, Msg: fmt.Sprintf("the JSON body nests deeper than %d levels", maxJSONDepth)}
	}
	req := plogotlp.NewExportRequest()
	if err := req.UnmarshalJSON(body); err != nil {
		return nil, &DecodeError{Cause: CauseMalformed, Msg: "malformed OTLP/JSON: " + err.Error()}
	}
	return req.MarshalProto()
}

// jsonDepth is the deepest nesting of arrays and objects in b (strings
// skipped), without parsing it.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	inString, esc := false, false
	for _, c := range b {
		if inString {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}
