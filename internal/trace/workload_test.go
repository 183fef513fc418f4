package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The live tests trace real processes: the test binary re-executes itself
// as a workload when workloadEnv is set, so the traced process is a Go
// program with the same runtime behaviour as our producer and aggregator.
//
//	aggregator SOCK OUT   listen on SOCK, print "ready", accept one
//	                      connection, read it, write batches of >= 4 KiB to
//	                      OUT with an fsync after each, exit at EOF
//	producer SOCK N SIZE GAP  connect, print "ready", wait for a line on
//	                      stdin, write N records of SIZE bytes (one write
//	                      each, GAP between them), exit
//	udpflood N            an unread UDP socket with a tiny receive buffer,
//	                      flooded with N datagrams after the stdin line
//	tcp N SIZE            N writes of SIZE bytes over loopback TCP
const workloadEnv = "LOGAGG_TRACE_WORKLOAD"

func runWorkload(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no workload")
	}
	atoi := func(i int) int {
		n, _ := strconv.Atoi(args[i])
		return n
	}
	switch args[0] {
	case "aggregator":
		return workAggregator(args[1], args[2])
	case "producer":
		gap, _ := time.ParseDuration(args[4])
		return workProducer(args[1], atoi(2), atoi(3), gap)
	case "udpflood":
		return workUDPFlood(atoi(1))
	case "tcp":
		return workTCP(atoi(1), atoi(2))
	}
	return fmt.Errorf("unknown workload %q", args[0])
}

func waitGo() {
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

func workAggregator(sock, out string) error {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var batch []byte
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := f.Write(batch); err != nil {
			return err
		}
		batch = batch[:0]
		return f.Sync()
	}
	for {
		n, err := c.Read(buf)
		// Keep whole lines only: a record is a line.
		batch = append(batch, buf[:n]...)
		if i := bytes.LastIndexByte(batch, '\n'); i >= 0 && len(batch) >= 4096 {
			rest := append([]byte(nil), batch[i+1:]...)
			batch = batch[:i+1]
			if err := flush(); err != nil {
				return err
			}
			batch = append(batch, rest...)
		}
		if errors.Is(err, io.EOF) {
			return flush()
		}
		if err != nil {
			return err
		}
	}
}

func workProducer(sock string, n, size int, gap time.Duration) error {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	waitGo()
	rec := bytes.Repeat([]byte("x"), size)
	rec[size-1] = '\n'
	for i := 0; i < n; i++ {
		if _, err := c.Write(rec); err != nil {
			return err
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	return nil
}

func workUDPFlood(n int) error {
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	defer rx.Close()
	raw, err := rx.SyscallConn()
	if err != nil {
		return err
	}
	// The smallest buffer the kernel allows (it doubles and floors the
	// value), so that the queue overflows after a few datagrams.
	_ = raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1) })
	tx, err := net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		return err
	}
	defer tx.Close()
	waitGo()
	msg := make([]byte, 1000)
	for i := 0; i < n; i++ {
		_, _ = tx.Write(msg) // drops happen at the receiver; the sender never sees them
	}
	return nil
}

func workTCP(n, size int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, err = io.Copy(io.Discard, c)
		}
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	waitGo()
	rec := bytes.Repeat([]byte("t"), size)
	for i := 0; i < n; i++ {
		if _, err := c.Write(rec); err != nil {
			return err
		}
	}
	c.Close()
	return <-done
}
