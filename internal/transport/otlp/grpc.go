package otlp

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ipclab/logagg/internal/otlpwire"
)

// The buffers of a gRPC connection (see serveGRPC).
const (
	grpcReadBuffer  = 8 << 10
	grpcWriteBuffer = 8 << 10
	// grpcStreamWindow is what a call may send before its handler reads
	// it: each call holds that much of max_inflight while it is open
	// (tapStream). grpc-go's default, a window that grows with the
	// bandwidth it measures, bounded nothing. grpc-go grants a window
	// again once a quarter of it is read: with HTTP/2's smallest (64 KiB)
	// that was a WINDOW_UPDATE every 16 KiB, six for a request of 512
	// records, each a write on the connection and a wake-up on both sides
	// (ADR 0062, amended 2026-11-28). A listener whose max_request is
	// smaller has a window of that size (grpcWindow).
	grpcStreamWindow = 1 << 20
	// grpcMinWindow is HTTP/2's initial window, the smallest grpc-go takes.
	grpcMinWindow = 64 << 10
	// grpcConnWindow is the connection's: gRPC grants it again as data
	// arrives, whoever reads it, so it bounds no memory, only how much a
	// connection has in flight.
	grpcConnWindow = 1 << 20
)

// serveGRPC serves the LogsService on the listener until ctx ends.
//
// Export is registered as a stream handler, which on the wire is the same
// as the unary method clients call: the handler then receives the request
// itself, so a client that does not finish sending it within the timeout
// is cut off, and errors gRPC meets while receiving (too large, a codec it
// cannot decompress) are counted with their cause.
func (l *Listener) serveGRPC(ctx context.Context) error {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(otlpwire.Codec{}),
		grpc.MaxRecvMsgSize(l.p.MaxRequest),
		// Stop waits for the handlers: Run must not return while one
		// still hands records to the sink.
		grpc.WaitForHandlers(true),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			l.r.refuse(CauseUnimplemented)
			return status.Error(codes.Unimplemented, "logagg serves only "+otlpwire.ExportPath)
		}),
		// SDKs ping idle connections; the default policy (at most every
		// five minutes) would answer them with GOAWAY "too_many_pings".
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// A connection's buffers are most of what it holds between
		// requests (GRPCConnCost): grpc-go's default of 32 KiB each made
		// an idle connection 56 KiB. A smaller read buffer costs nothing
		// for bodies (bufio reads a frame larger than it straight into the
		// frame's buffer), and the write buffer only carries replies.
		grpc.ReadBufferSize(grpcReadBuffer),
		grpc.WriteBufferSize(grpcWriteBuffer),
		grpc.StaticStreamWindowSize(int32(l.grpcWindow())),
		grpc.StaticConnWindowSize(grpcConnWindow),
		grpc.InTapHandle(l.tapStream),
	}
	if idle := l.d.Opts.IdleTimeout; idle > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle}))
	}
	if l.tls != nil {
		opts = append(opts, grpc.Creds(countedCreds{credentials.NewTLS(l.tls.config()), l.r}),
			grpc.ConnectionTimeout(l.p.Timeout))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: otlpwire.Service,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Export",
			Handler:       func(_ any, ss grpc.ServerStream) error { return l.grpcExport(ss) },
			ClientStreams: true,
			ServerStreams: true,
		}},
	}, struct{}{})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l.ln) }()
	select {
	case err := <-errc:
		srv.Stop()
		l.r.releaseEmitters()
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	t := time.NewTimer(l.d.Opts.DrainGrace)
	select {
	case <-stopped:
		t.Stop()
	case <-t.C:
		srv.Stop() // waits for the handlers (at worst until the hard stop ends a hand-over)
		<-stopped
	}
	err := <-errc
	l.r.releaseEmitters()
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// tapStream runs when a call's headers arrive, before the server takes any
// of its data: it reserves what the call may send before its handler
// reads it (its window) of max_inflight, or
// refuses the call for backpressure at once. Without it, a client that
// opened calls and never finished them made the server buffer a window of
// each and run a handler for each (8,000 such calls took the daemon to
// 151 MiB, TestMemoryBudgetOTLPStreamsHeldOpen). The handler takes the
// reservation over as part of its request's (grpcExport); a call that ends
// without one gives it back.
func (l *Listener) tapStream(ctx context.Context, _ *tap.Info) (context.Context, error) {
	h := &callHold{n: l.grpcWindow()}
	if !l.r.room.TryTake(int64(h.n)) {
		return nil, grpcStatus(l.r.full())
	}
	h.owned.Store(true)
	// ctx ends with the call, however it ends: also when the server
	// aborts it after this (an expired grpc-timeout), without a handler.
	context.AfterFunc(ctx, func() {
		if h.owned.CompareAndSwap(true, false) {
			l.r.unadmit(h.n)
		}
	})
	return context.WithValue(ctx, callHoldKey{}, h), nil
}

// grpcWindow is a call's flow-control window: grpcStreamWindow, or what
// a call is charged in all (Params.CallCharge: max_request, but HTTP/2's
// smallest window at least) when that is less. A call may send its
// window before its handler reads it: a window past its charge would let
// it hold more than it was charged.
func (l *Listener) grpcWindow() int {
	return min(grpcStreamWindow, l.p.CallCharge)
}

// callHold is what tapStream reserved for a call, and whether it still
// holds it (else the handler took it over, or the call ended).
type callHold struct {
	n     int
	owned atomic.Bool
}

type callHoldKey struct{}

// takeHold takes over what tapStream reserved for the call of ctx.
func takeHold(ctx context.Context) int {
	if h, ok := ctx.Value(callHoldKey{}).(*callHold); ok && h.owned.CompareAndSwap(true, false) {
		return h.n
	}
	return 0
}

// grpcExport serves one Export call.
func (l *Listener) grpcExport(ss grpc.ServerStream) error {
	ctx := ss.Context()
	info := l.info(ctx)
	// gRPC reads the message whole before handing it over, and says its
	// size only then: reserve the most the call may hold, of which
	// tapStream reserved a part.
	held := l.p.CallCharge
	pre := takeHold(ctx)
	if ref := l.r.admit(ctx, held-pre); ref != nil {
		l.r.unadmit(pre)
		return grpcStatus(ref)
	}
	raw := &otlpwire.Raw{Pool: l.r.bodies} // otlpwire.Codec reads into a buffer from the pool
	recv := make(chan error, 1)
	go func() { recv <- ss.RecvMsg(raw) }()
	t := time.NewTimer(l.p.Timeout)
	select {
	case err := <-recv:
		t.Stop()
		if err != nil {
			l.r.bodies.Put(raw.B)
			l.r.unadmit(held)
			return l.recvError(err)
		}
	case <-t.C:
		// raw stays with the receiving goroutine, which returns once the
		// stream is closed (this handler's return closes it); so does the
		// reservation.
		go func() {
			<-recv
			l.r.bodies.Put(raw.B)
			l.r.unadmit(held)
		}()
		l.r.refuse(CauseTimeout)
		return status.Errorf(codes.DeadlineExceeded, "logagg: the request was not received within %v", l.p.Timeout)
	}
	// The body's buffer is of its size class (otlpwire.Codec takes it
	// from receiver.bodies), so what bodies hold is at most twice their size.
	res, ref := l.r.ingest(ctx, raw.B, len(raw.B), info, held)
	l.r.bodies.Put(raw.B) // where a request of its size finds it
	if ref != nil {
		return grpcStatus(ref)
	}
	return ss.SendMsg(&otlpwire.Raw{B: otlpwire.AppendResponse(nil, int64(res.rejected), res.msg)})
}

// recvError counts what gRPC refused while receiving a request and
// returns it.
func (l *Listener) recvError(err error) error {
	if errors.Is(err, io.EOF) {
		l.r.refuse(CauseMalformed)
		return status.Error(codes.InvalidArgument, "logagg: no request sent")
	}
	cause := CauseInternal
	switch status.Code(err) {
	case codes.ResourceExhausted:
		cause = CauseTooLarge
	case codes.Internal, codes.Unimplemented:
		cause = CauseEncoding // a body that does not decompress, a codec we lack
	case codes.Canceled, codes.DeadlineExceeded:
		cause = CauseCancelled
	}
	l.r.refuse(cause)
	l.d.Log.Debug("otlp: request refused", "cause", cause, "err", err)
	return err
}

// info is the connection's metadata, from the peer address our listener
// gave the connection.
func (l *Listener) info(ctx context.Context) *connInfo {
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.Addr.(*peerAddr); ok {
			return a.info
		}
	}
	return l.ln.anonymous()
}

// grpcStatus turns a refusal into the status OTLP clients act on:
// RESOURCE_EXHAUSTED with RetryInfo for backpressure and UNAVAILABLE at
// shutdown (both retried after the delay), INVALID_ARGUMENT for a request
// that is wrong (not retried).
func grpcStatus(r *refusal) error {
	var st *status.Status
	switch r.cause {
	case CauseBackpressure:
		st = status.New(codes.ResourceExhausted, r.msg)
	case CauseStopping:
		st = status.New(codes.Unavailable, r.msg)
	case CauseNotWritten:
		return status.Error(codes.DeadlineExceeded, r.msg)
	case CauseTooLarge:
		return status.Error(codes.ResourceExhausted, r.msg) // no RetryInfo: the same request would fail again
	default:
		return status.Error(codes.InvalidArgument, r.msg)
	}
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(RetryAfter)}); err == nil {
		st = d
	}
	return st.Err()
}

// anonymous is the metadata of a connection our listener did not wrap
// (never expected).
func (l *connListener) anonymous() *connInfo {
	l.anonOnce.Do(func() {
		l.anon.meta.Transport, l.anon.meta.Listener = l.transport, l.url
		l.anon.meta.Rendered = true
		l.anon.meta.Prepare()
	})
	return &l.anon
}
