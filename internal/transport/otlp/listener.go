package otlp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bytesize"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/peerid"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
)

// The URL schemes: gRPC and HTTP, on TCP or on a unix stream socket.
const (
	SchemeGRPC     = "otlp"          // otlp://127.0.0.1:4317
	SchemeGRPCUnix = "otlp+unix"     // otlp+unix:///run/logagg/otlp.sock
	SchemeHTTP     = "otlphttp"      // otlphttp://127.0.0.1:4318
	SchemeHTTPUnix = "otlphttp+unix" // otlphttp+unix:///run/logagg/otlp-http.sock
)

// The ports OTLP uses by default (a URL without a port gets them).
const (
	DefaultGRPCPort = 4317
	DefaultHTTPPort = 4318
)

// Defaults of the URL's parameters.
const (
	DefaultMaxRequest  = 4 << 20
	DefaultMaxInflight = 16 << 20
	DefaultTimeout     = 10 * time.Second
	// RetryAfter is the pause a refused client is asked to make (gRPC
	// RetryInfo, HTTP Retry-After, whose unit is the second).
	RetryAfter = time.Second
)

func init() {
	for _, s := range []string{SchemeGRPC, SchemeGRPCUnix, SchemeHTTP, SchemeHTTPUnix} {
		transport.Register(s, New)
		transport.RegisterCheck(s, func(u *url.URL, _ int) error { return CheckURL(u) })
	}
}

// Params are what a listen URL's query may say.
type Params struct {
	// Ack is AckQueued (the default: success once the records are in the
	// output's queue) or AckWritten (once they are written to every
	// output they go to).
	Ack string
	// MaxRequest bounds a request's body, decompressed (413 or
	// RESOURCE_EXHAUSTED past it).
	MaxRequest int
	// MaxInflight bounds the request bytes whose records are not yet
	// written; past it requests are refused so that clients back off
	// (429 or RESOURCE_EXHAUSTED with retry info). At least twice
	// CallCharge.
	MaxInflight int
	// CallCharge is what one request holds of MaxInflight before its
	// body is read: MaxRequest, and for gRPC at least HTTP/2's 64 KiB
	// window, which grpc-go will not go below and a call may send before
	// its handler reads it. MaxInflight is at least twice it.
	CallCharge int
	// Timeout bounds how long a client may take to send one request (and
	// a TLS handshake).
	Timeout time.Duration
	// TLSCert and TLSKey are PEM files: with them the receiver speaks TLS
	// only. TLSClientCA makes it mutual: a client must show a certificate
	// of these CAs.
	TLSCert, TLSKey, TLSClientCA string
}

// The two answers of Params.Ack.
const (
	AckQueued  = "queued"
	AckWritten = "written"
)

// ParseParams reads the query of a listen URL of scheme.
func ParseParams(scheme string, q url.Values) (Params, error) {
	p := Params{Ack: AckQueued, MaxRequest: DefaultMaxRequest, MaxInflight: DefaultMaxInflight, Timeout: DefaultTimeout}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "ack":
			if v != AckQueued && v != AckWritten {
				return p, fmt.Errorf("ack=%q: want %s or %s", v, AckQueued, AckWritten)
			}
			p.Ack = v
		case "max_request", "max_inflight":
			n, err := bytesize.Parse(v)
			if err != nil {
				return p, fmt.Errorf("%s=%q: %w", k, v, err)
			}
			if n < 1024 || n > 1<<30 {
				return p, fmt.Errorf("%s=%q: want 1 KiB to 1 GiB", k, v)
			}
			if k == "max_request" {
				p.MaxRequest = int(n)
			} else {
				p.MaxInflight = int(n)
			}
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return p, fmt.Errorf("timeout=%q: want a positive duration", v)
			}
			p.Timeout = d
		case "tls_cert":
			p.TLSCert = v
		case "tls_key":
			p.TLSKey = v
		case "tls_client_ca":
			p.TLSClientCA = v
		default:
			return p, fmt.Errorf("unknown parameter %q (want ack, max_request, max_inflight, timeout, tls_cert, tls_key, tls_client_ca)", k)
		}
	}
	if (p.TLSCert == "") != (p.TLSKey == "") {
		return p, errors.New("tls_cert and tls_key go together")
	}
	if p.TLSClientCA != "" && p.TLSCert == "" {
		return p, errors.New("tls_client_ca needs tls_cert and tls_key: mutual TLS is TLS first")
	}
	p.CallCharge = p.MaxRequest
	if scheme == SchemeGRPC || scheme == SchemeGRPCUnix {
		p.CallCharge = max(p.MaxRequest, grpcMinWindow)
	}
	if !q.Has("max_inflight") && p.MaxInflight < 2*p.CallCharge {
		p.MaxInflight = 2 * p.CallCharge
	}
	if p.MaxInflight >= 2*p.CallCharge {
		return p, nil
	}
	if p.CallCharge > p.MaxRequest {
		return p, fmt.Errorf("max_inflight=%d is below twice %d, what a gRPC call holds before it is read "+
			"(max_request=%d, but never less than HTTP/2's 64 KiB window): two calls must fit", p.MaxInflight, p.CallCharge, p.MaxRequest)
	}
	return p, fmt.Errorf("max_inflight=%d is below twice max_request=%d: two requests must fit", p.MaxInflight, p.MaxRequest)
}

// CheckURL checks a listen URL of this package without binding anything
// (aggregator check-config); URLs of other schemes pass.
func CheckURL(u *url.URL) error {
	switch u.Scheme {
	case SchemeGRPC, SchemeHTTP:
		if _, err := listenAddr(u); err != nil {
			return err
		}
	case SchemeGRPCUnix, SchemeHTTPUnix:
		if _, err := transport.PathOf(&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, Opaque: u.Opaque}); err != nil {
			return err
		}
	default:
		return nil
	}
	p, err := ParseParams(u.Scheme, u.Query())
	if err == nil {
		_, err = newServerTLS(p)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", transport.ErrBadAddress, u.Redacted(), err)
	}
	return nil
}

// Listener is one OTLP receiver: a gRPC or HTTP server on a bound socket.
type Listener struct {
	scheme    string
	url       string
	ln        *connListener
	claim     *transport.Claim // unix sockets
	d         transport.Deps
	p         Params
	tls       *serverTLS // nil: plain text
	r         *receiver
	closeOnce sync.Once
	closeErr  error
}

// New binds the address of u (see the package doc for the URL forms).
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	p, err := ParseParams(u.Scheme, u.Query())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", transport.ErrBadAddress, u.Redacted(), err)
	}
	l := &Listener{scheme: u.Scheme, p: p}
	if l.tls, err = newServerTLS(p); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", transport.ErrBadAddress, u.Redacted(), err)
	}
	unixSock := u.Scheme == SchemeGRPCUnix || u.Scheme == SchemeHTTPUnix
	var raw net.Listener
	canonical := url.URL{Scheme: u.Scheme, RawQuery: u.Query().Encode()}
	if unixSock {
		path, err := transport.PathOf(&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, Opaque: u.Opaque})
		if err != nil {
			return nil, err
		}
		s, err := d.Inherited.Take(d.FDName, unix.SOCK_STREAM, transport.MatchPath(path))
		switch {
		case err != nil:
			return nil, err
		case s != nil:
			if s.Family != unix.AF_UNIX {
				s.Close()
				return nil, fmt.Errorf("%w: inherited %s is not a unix socket", transport.ErrBadAddress, s)
			}
			if l.claim, err = transport.ClaimInherited(s.Path); err != nil {
				s.Close()
				return nil, err
			}
			if raw, err = s.Listener(); err != nil {
				l.claim.Release()
				return nil, err
			}
			path = s.Path
		default:
			if l.claim, err = transport.ClaimPath(path, transport.NodeSocket); err != nil {
				return nil, err
			}
			if raw, err = l.claim.ListenUnix(d.Opts); err != nil {
				l.claim.Release()
				return nil, err
			}
		}
		canonical.Path = path
	} else {
		addr, err := listenAddr(u)
		if err != nil {
			return nil, err
		}
		ta, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", transport.ErrBadAddress, addr, err)
		}
		s, err := d.Inherited.Take(d.FDName, unix.SOCK_STREAM, transport.MatchAddr(ta.AddrPort()))
		switch {
		case err != nil:
			return nil, err
		case s != nil:
			if s.Family == unix.AF_UNIX {
				s.Close()
				return nil, fmt.Errorf("%w: inherited %s is not a TCP socket", transport.ErrBadAddress, s)
			}
			if raw, err = s.Listener(); err != nil {
				return nil, err
			}
		default:
			if raw, err = net.ListenTCP("tcp", ta); err != nil {
				return nil, fmt.Errorf("%w: listen %s: %w", transport.ErrBadAddress, addr, err)
			}
		}
		canonical.Host = raw.Addr().String()
	}
	l.url = canonical.String()
	transport.Relabel(&d, l.url)
	l.d = d
	l.ln = newConnListener(raw, l.url, l.transportName(), unixSock, d, l.connCost())
	l.r = newReceiver(l.url, d, p)
	return l, nil
}

// transportName is agg.transport: the scheme.
func (l *Listener) transportName() string { return l.scheme }

// listenAddr is the host:port u asks for: the loopback for an empty host,
// OTLP's port for none.
func listenAddr(u *url.URL) (string, error) {
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("%w: %s has a path; want %s://HOST:PORT", transport.ErrBadAddress, u.Redacted(), u.Scheme)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = strconv.Itoa(DefaultGRPCPort)
		if u.Scheme == SchemeHTTP {
			port = strconv.Itoa(DefaultHTTPPort)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// URL implements transport.Listener.
func (l *Listener) URL() string { return l.url }

// Close implements transport.Listener: it closes the socket (and removes
// a unix socket's file). Safe after Run returned.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.ln.Close()
		if errors.Is(l.closeErr, net.ErrClosed) {
			l.closeErr = nil
		}
		if l.claim != nil {
			l.claim.Release()
		}
	})
	return l.closeErr
}

// Run implements transport.Listener: it serves until ctx ends, then lets
// the requests in progress finish for at most Options.DrainGrace (their
// records are handed over, or counted dropped at the hard stop), closes
// every connection and returns.
func (l *Listener) Run(ctx context.Context) error {
	defer l.Close()
	switch l.scheme {
	case SchemeGRPC, SchemeGRPCUnix:
		return l.serveGRPC(ctx)
	default:
		return l.serveHTTP(ctx)
	}
}

// connInfo is what the receiver knows about one connection: its peer, as
// the record metadata of every request on it (prepared once).
type connInfo struct {
	meta record.Meta
}

// peerAddr is a connection's remote address carrying its connInfo, so that
// gRPC hands it to the handler (peer.FromContext) without a lookup.
type peerAddr struct {
	net.Addr
	info *connInfo
}

// peerConn counts itself out of the open connections once closed.
type peerConn struct {
	net.Conn
	addr *peerAddr
	l    *connListener
	once sync.Once
}

func (c *peerConn) RemoteAddr() net.Addr { return c.addr }

func (c *peerConn) Close() error {
	c.once.Do(c.l.release)
	return c.Conn.Close()
}

// connListener accepts only what can be served, as every stream
// transport does (transport.Admission, ADR 0052): a connection slot of
// Options.MaxConns and a descriptor from the daemon's gate, else it stops
// accepting and clients wait in the backlog. It counts the connections
// and finds each one's peer: SO_PEERCRED on a unix socket, the budgeted
// lookup of package peerid on loopback TCP.
type connListener struct {
	net.Listener
	url, transport string
	unix           bool
	d              transport.Deps
	adm            *transport.Admission
	ctx            context.Context // ends at Close
	cancel         context.CancelFunc
	anon           connInfo
	anonOnce       sync.Once
}

func newConnListener(ln net.Listener, url, transportName string, unixSock bool, d transport.Deps, cost int64) *connListener {
	c := &connListener{Listener: ln, url: url, transport: transportName, unix: unixSock, d: d,
		adm: transport.NewAdmission(transport.ListenerAdmissionConfig(d, cost, metrics.PauseMaxConns, metrics.PauseFDs, metrics.PauseMemory))}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

func (l *connListener) Close() error {
	l.cancel()
	return l.Listener.Close()
}

func (l *connListener) release() {
	l.adm.Release(1, true)
	if l.d.Metrics != nil {
		l.d.Metrics.Conns.Dec()
	}
}

// Accept waits until a connection can be served, then for one. Errors
// that say the process is short of something (EMFILE, ENOMEM) pause it
// here, counted, rather than reach the server.
func (l *connListener) Accept() (net.Conn, error) {
	var c net.Conn
	for {
		if !l.adm.Admit(l.ctx, 1) {
			return nil, net.ErrClosed
		}
		var err error
		if c, err = l.Listener.Accept(); err == nil {
			break
		}
		l.adm.Refund(1, true)
		if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) || !l.adm.Failed(l.ctx, err) {
			return nil, err
		}
	}
	l.adm.Commit(1, -1)
	if l.d.Metrics != nil {
		l.d.Metrics.Accepted.Inc()
		l.d.Metrics.Conns.Inc()
	}
	info := &connInfo{meta: record.Meta{Transport: l.transport, Listener: l.url, Rendered: true}}
	info.meta.Peer = l.peer(c)
	info.meta.Prepare()
	return &peerConn{Conn: c, addr: &peerAddr{Addr: c.RemoteAddr(), info: info}, l: l}, nil
}

// peer finds who is at the other end of c.
func (l *connListener) peer(c net.Conn) record.Peer {
	switch cc := c.(type) {
	case *net.UnixConn:
		var p record.Peer
		if rc, err := cc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					p = record.Peer{HasCreds: true, PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Via: "kernel"}
				}
			})
		}
		return p
	case *net.TCPConn:
		p := record.Peer{Addr: c.RemoteAddr().String()}
		la, lok := c.LocalAddr().(*net.TCPAddr)
		ra, rok := c.RemoteAddr().(*net.TCPAddr)
		if lok && rok && ra.IP.IsLoopback() {
			p, _ = peerid.LookupTCP(la, ra, peerid.DefaultBudget)
		}
		return p
	}
	return record.Peer{}
}

// GRPCConnCost and HTTPConnCost are what one connection of an OTLP
// receiver is charged of the connections' memory share (a stream
// connection is charged transport.ConnCost). Measured with 1,000 idle
// connections on 2026-11-27, in what the Go runtime holds (its soft limit
// counts allocated heap, touched or not): a gRPC connection 15.5 KiB of
// heap (framer, HPACK tables, the read buffer, flow-control and keepalive
// state), 9 KiB of stacks (its reader, writer and keepalive goroutines)
// and 2.3 KiB of runtime structures, 56 KiB before its buffers were made
// smaller (serveGRPC); an HTTP/1.1 connection 10 KiB of heap (net/http's
// 4 KiB reader and writer), 4 KiB of stack and 2 KiB of runtime.
//
// HTTP2ConnCost is an OTLP/HTTP connection's over TLS, where a client may
// choose HTTP/2: its calls bring data before their handlers read it, up
// to the connection's window, and each runs a handler (serveHTTP bounds
// both); HTTP/1.1 leaves unread data in the kernel's socket buffer.
const (
	GRPCConnCost  = 32 << 10
	HTTPConnCost  = 16 << 10
	HTTP2ConnCost = HTTPConnCost + h2ConnWindow + h2Streams*h2StreamCost
)

// connCost is what each connection of this listener is charged of the
// connections' memory share.
func (l *Listener) connCost() int64 {
	switch {
	case l.scheme == SchemeGRPC || l.scheme == SchemeGRPCUnix:
		return GRPCConnCost
	case l.tls != nil:
		return HTTP2ConnCost
	default:
		return HTTPConnCost
	}
}
