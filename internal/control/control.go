// Package control serves the daemon's control socket, where `aggregator
// tap` watches the records flowing through the sink.
//
// The socket is a unix stream socket the daemon creates with mode 0600:
// only its own user may connect (and root, whom modes do not stop); every
// connection's credentials (SO_PEERCRED) are checked again, so a socket
// file whose mode was loosened still serves nobody else.
//
// Protocol: the client sends one JSON line, {"tap":{"match":"YAML"}}
// (match: the rules' match language; empty: every record). The server
// answers one JSON line, {"ok":true} or {"error":"..."}, then streams the
// tapped records as JSON lines until either side closes. When the tap
// could not keep up, a line {"tap":"dropped","records":N} says how many
// copies it lost since the last such line.
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/ipclab/logagg/internal/rules"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
)

// Request is the first line a client sends.
type Request struct {
	Tap *TapRequest `json:"tap"`
}

// TapRequest asks for the records a match selects.
type TapRequest struct {
	Match string `json:"match"` // YAML of a rules.Match; "" for every record
}

// Reply is the server's first line.
type Reply struct {
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// tapBuffer is how many copies a tap holds before it drops them.
const tapBuffer = 4096

// Server is a control socket. Create it with Listen, then Run it once.
type Server struct {
	ln    *net.UnixListener
	claim *transport.Claim
	sink  *sink.Sink
	log   *slog.Logger
	wg    sync.WaitGroup

	mu    sync.Mutex
	conns map[*net.UnixConn]struct{} // closed at shutdown: a tap blocked writing to a client that does not read ends
}

// Listen creates the control socket at path (a stale one of ours is
// replaced; another user's, or anything not a socket, is refused).
func Listen(path string, s *sink.Sink, log *slog.Logger) (*Server, error) {
	claim, err := transport.ClaimPath(path, transport.NodeSocket)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	o := transport.DefaultOptions()
	o.SocketMode, o.SocketGID = 0o600, -1
	ln, err := claim.ListenUnix(o)
	if err != nil {
		claim.Release()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{ln: ln, claim: claim, sink: s, log: log, conns: map[*net.UnixConn]struct{}{}}, nil
}

// Close releases a server whose Run was never called.
func (s *Server) Close() {
	s.ln.Close()
	s.claim.Release()
}

// Addr is the socket's path.
func (s *Server) Addr() string { return s.claim.Path }

// Run serves until ctx ends, then closes every tap and the socket.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	defer s.claim.Release()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			s.log.Warn("control socket: accept", "err", err)
			time.Sleep(50 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.serve(ctx, c)
		}()
	}
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// allowed reports whether the peer is our user or root.
func allowed(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	rc.Control(func(fd uintptr) {
		cr, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		ok = err == nil && (cr.Uid == 0 || int(cr.Uid) == os.Geteuid())
	})
	return ok
}

func (s *Server) serve(ctx context.Context, c *net.UnixConn) {
	w := bufio.NewWriter(c)
	reply := func(r Reply) {
		b, _ := json.Marshal(r)
		w.Write(append(b, '\n'))
		w.Flush()
	}
	if !allowed(c) {
		reply(Reply{Error: "only the daemon's user and root may use the control socket"})
		return
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReaderSize(c, 64<<10).ReadSlice('\n')
	if err != nil {
		reply(Reply{Error: "want one request line: " + err.Error()})
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil || req.Tap == nil {
		reply(Reply{Error: `want {"tap":{"match":"..."}}`})
		return
	}
	t, err := newTap(req.Tap.Match)
	if err != nil {
		reply(Reply{Error: err.Error()})
		return
	}
	reply(Reply{OK: true})
	s.sink.AddTap(t)
	defer s.sink.RemoveTap(t)
	// A closed connection (the client went away) ends the tap: the read
	// side sees EOF while the write side may be idle.
	gone := make(chan struct{})
	go func() {
		c.SetReadDeadline(time.Time{})
		var b [256]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				close(gone)
				return
			}
		}
	}()
	reported := int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-gone:
			return
		case l := <-t.Lines:
			if d := t.Dropped.Load(); d > reported {
				fmt.Fprintf(w, "{\"tap\":\"dropped\",\"records\":%d}\n", d-reported)
				reported = d
			}
			if _, err := w.Write(l); err != nil {
				return
			}
			// Flush when nothing else waits, so a slow trickle shows at once.
			if len(t.Lines) == 0 {
				if err := w.Flush(); err != nil {
					return
				}
			}
		}
	}
}

// newTap compiles a match in the rules' language.
func newTap(matchYAML string) (*sink.Tap, error) {
	t := &sink.Tap{Lines: make(chan []byte, tapBuffer)}
	if matchYAML == "" {
		return t, nil
	}
	var m rules.Match
	dec := yaml.NewDecoder(strings.NewReader(matchYAML))
	dec.KnownFields(true) // a misspelt condition must not match everything
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("match: %w", err)
	}
	set, err := rules.Compile([]rules.Spec{{Name: "tap", Match: &m, Route: []string{"tap"}}}, []string{"tap"}, rules.Discard)
	if err != nil {
		return nil, fmt.Errorf("match: %w", err)
	}
	t.Match = set
	return t, nil
}
