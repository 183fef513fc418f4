package shmring

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkThroughput compares one producer goroutine sending 100-byte
// records to one consumer goroutine through a memfd ring and through a unix
// stream socket pair (one write(2) per record, as the producer does; the
// reader uses a 64 KiB buffer), in the same run.
//
// Reproduce: go test -run '^$' -bench Throughput -benchtime 2000000x ./internal/shmring/
// (records/s is the figure to compare; ns/op is per record).
func BenchmarkThroughput(b *testing.B) {
	rec := bytes.Repeat([]byte("x"), 99)
	rec = append(rec, '\n') // 100 B, a newline-terminated record
	b.Run("shm/100B", func(b *testing.B) {
		r, w := pair(b, Config{})
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		done := make(chan int)
		go func() {
			got := 0
			for got < b.N {
				n, err := r.Poll(func([]byte) {})
				if err != nil {
					panic(err)
				}
				got += n
				if n == 0 {
					r.Wait(nil)
				}
			}
			done <- got
		}()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := w.Write(rec); err != nil {
				b.Fatal(err)
			}
		}
		<-done
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("unixstream/100B", func(b *testing.B) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		conn := func(fd int) net.Conn {
			f := os.NewFile(uintptr(fd), "sp")
			c, err := net.FileConn(f)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			return c
		}
		wc, rc := conn(fds[0]), conn(fds[1])
		defer wc.Close()
		defer rc.Close()
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		done := make(chan int)
		go func() {
			br := bufio.NewReaderSize(rc, 64<<10)
			got := 0
			for got < b.N {
				if _, err := br.ReadSlice('\n'); err != nil {
					panic(err)
				}
				got++
			}
			done <- got
		}()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := wc.Write(rec); err != nil {
				b.Fatal(err)
			}
		}
		<-done
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
}
