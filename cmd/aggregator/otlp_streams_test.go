package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ipclab/logagg/internal/otlpwire"
	"github.com/ipclab/logagg/internal/testenv"
)

// heldStreams is a hostile gRPC client: on each of its connections it
// opens Export calls one after another, sends part of a request on each
// (a message header announcing 1 MiB, then 16 KiB of it), and never
// finishes any. It honours HTTP/2 flow control, so whatever the server
// holds it granted.
type heldStreams struct {
	mu      sync.Mutex
	opened  int // calls whose headers and data were sent
	ended   int // calls the server ended (trailers or RST_STREAM)
	stalled int // connections the server stopped granting window to
}

func (h *heldStreams) counts() (opened, ended int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opened, h.ended
}

// hold opens up to n streams on one connection to sock within d, and
// keeps the connection open until the test ends.
func (h *heldStreams) hold(t *testing.T, sock string, n int, d time.Duration) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var writing sync.Mutex // the framer's writes: the loop below and the reader's SETTINGS acks
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	window := make(chan int32, 1024) // connection window the server grants
	go func() {
		ended := map[uint32]bool{}
		end := func(id uint32) {
			if !ended[id] {
				ended[id] = true
				h.mu.Lock()
				h.ended++
				h.mu.Unlock()
			}
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				close(window)
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					writing.Lock()
					fr.WriteSettingsAck() //nolint:errcheck // the writer below sees a dead connection
					writing.Unlock()
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID == 0 {
					window <- int32(f.Increment)
				}
			case *http2.RSTStreamFrame:
				end(f.StreamID)
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					end(f.StreamID)
				}
			}
		}
	}()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "logagg"},
		{":path", otlpwire.ExportPath}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) //nolint:errcheck // a bytes.Buffer
	}
	block := hb.Bytes()
	const part = 16<<10 - 5 // one frame of the default maximum size
	data := make([]byte, 5+part)
	binary.BigEndian.PutUint32(data[1:5], 1<<20) // a 1 MiB message, of which 16 KiB come
	conn := int32(65535)                         // HTTP/2's initial connection window
	deadline := time.Now().Add(d)
	for i := range n {
		for conn < int32(len(data)) {
			select {
			case inc, ok := <-window:
				if !ok {
					return
				}
				conn += inc
			case <-time.After(time.Until(deadline)):
				h.mu.Lock()
				h.stalled++
				h.mu.Unlock()
				return
			}
		}
		id := uint32(2*i + 1)
		writing.Lock()
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true})
		if err == nil {
			err = fr.WriteData(id, false, data)
		}
		writing.Unlock()
		if err != nil {
			return
		}
		conn -= int32(len(data))
		h.mu.Lock()
		h.opened++
		h.mu.Unlock()
	}
}

// TestMemoryBudgetOTLPStreamsHeldOpen: clients that open gRPC calls and
// never finish them cannot make the daemon hold more than its budget.
// HTTP/2 lets each call bring up to its flow-control window before the
// receiver reads it; before the receiver charged calls that window, 8,000
// such calls on four connections took the daemon to 151 MiB. Now the calls
// that find no room are refused at once for backpressure (counted), and
// the others when they have waited for room as any request does.
func TestMemoryBudgetOTLPStreamsHeldOpen(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "otlp.sock")
	p := startAgg(t, dir, "--listen", "otlp+unix://"+sock)
	budget := int64(p.metric("logagg_memory_budget_bytes", `kind="total"`))
	var h heldStreams
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.hold(t, sock, 2000, 20*time.Second)
		}()
	}
	wg.Wait()
	opened, _ := h.counts()
	testenv.Poll(t, 20*time.Second, "every call answered", func() (int, bool) {
		_, ended := h.counts()
		return ended, ended == opened
	})
	peak := procStatus(t, p.pid(), "VmHWM") << 10
	refused := p.metric("logagg_requests_refused_total")
	backpressure := p.metric("logagg_requests_refused_total", `cause="backpressure"`)
	t.Logf("%d calls opened and refused (%v for backpressure, the few admitted for their timeout), %d connections stalled; peak RSS %.1f MiB (budget %.0f MiB)",
		opened, backpressure, h.stalled, float64(peak)/(1<<20), float64(budget)/(1<<20))
	if opened < 8000 || refused < float64(opened) || backpressure < float64(opened)-16 {
		t.Errorf("%d calls opened, %v refused (%v for backpressure): want all 8,000, each refused, all but the admitted for backpressure",
			opened, refused, backpressure)
	}
	if peak > budget+budgetMargin {
		t.Errorf("peak RSS %.1f MiB with calls held open, over the budget (%.0f MiB) and margin", float64(peak)/(1<<20), float64(budget)/(1<<20))
	}
	p.stop(syscall.SIGTERM)
}
