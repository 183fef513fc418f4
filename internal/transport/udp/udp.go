// Package udp is the UDP transport (udp://host:port), for syslog over the
// network and for producers that prefer never to block.
//
// An empty host binds 127.0.0.1: this is a local aggregator, and listening
// on every interface must be asked for explicitly (udp://0.0.0.0:514).
// Port 0 binds an ephemeral port; URL then reports the real one. Every
// record's peer address is the datagram's source address.
//
// Receiving, framing, metrics and the shutdown drain are those of package
// dgram. Unlike unix datagrams, UDP loses at the receiver: when our receive
// buffer is full the kernel drops and counts, and we export that count as
// dropped_total{cause="kernel_rxq_ovfl"}. A UDP socket cannot refuse new
// datagrams, so the shutdown drain is bounded by Options.DrainGrace.
//
// # Concurrency and lifetimes
//
// A Listener is created bound by Open; Run is called at most once and serves
// from one goroutine; Close may be called at any time and more than once.
package udp

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/dgram"
)

// Scheme is the URL scheme and transport name.
const Scheme = "udp"

// maxDatagram is the largest UDP payload (65535 less the 8-byte UDP header,
// rounded up: IPv4 allows 65507, IPv6 without jumbograms 65527).
const maxDatagram = 65535

func init() { transport.Register(Scheme, Open) }

// Listener is a bound UDP socket.
type Listener struct {
	url string
	rx  *dgram.Receiver
}

// Open binds the socket named by u (a transport.Factory).
func Open(u *url.URL, d transport.Deps) (transport.Listener, error) {
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("%w: %s: want udp://host:port", transport.ErrBadAddress, u.Redacted())
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: want udp://host:port: %w", transport.ErrBadAddress, u.Redacted(), err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	addr, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", transport.ErrBadAddress, u.Redacted(), err)
	}
	var conn *net.UDPConn
	inh, err := d.Inherited.Take(d.FDName, unix.SOCK_DGRAM, transport.MatchAddr(addr.AddrPort()))
	switch {
	case err != nil:
		return nil, err
	case inh != nil:
		if inh.Family == unix.AF_UNIX {
			inh.Close()
			return nil, fmt.Errorf("%w: inherited %s is not a UDP socket", transport.ErrBadAddress, inh)
		}
		pc, err := inh.PacketConn()
		if err != nil {
			return nil, err
		}
		conn = pc.(*net.UDPConn)
	default:
		if conn, err = net.ListenUDP("udp", addr); err != nil {
			return nil, fmt.Errorf("%w: listen udp %s: %w", transport.ErrBadAddress, addr, err)
		}
	}
	l := &Listener{url: Scheme + "://" + conn.LocalAddr().String()}
	transport.Relabel(&d, l.url)
	// Network senders put a HOSTNAME in their RFC 3164 headers; rsyslog's
	// imudp parses it too (see record.Meta.ParseHostname).
	l.rx, err = dgram.New(dgram.Config{
		Conn:        conn,
		Deps:        d,
		Meta:        record.Meta{Transport: Scheme, Listener: l.url, ParseHostname: true},
		SourceAddr:  true,
		MaxDatagram: maxDatagram,
		Detach:      true,
		Coalesce:    d.Opts.ReadCoalesce,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return l, nil
}

// Run implements transport.Listener.
func (l *Listener) Run(ctx context.Context) error { return l.rx.Run(ctx) }

// URL implements transport.Listener; with port 0 it reports the bound port.
func (l *Listener) URL() string { return l.url }

// Stats exposes the receiver's counters (tests, benchmarks).
func (l *Listener) Stats() dgram.Stats { return l.rx.Stats() }

// Close implements transport.Listener.
func (l *Listener) Close() error { return l.rx.Close() }
