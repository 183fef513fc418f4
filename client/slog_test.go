package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/seqstamp"
)

func decodeLines(t *testing.T, data string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %v: %s", err, l)
		}
		out = append(out, m)
	}
	return out
}

func TestHandler(t *testing.T) {
	m, u := newMem(t, true, 0)
	w, err := Dial(u, WithSource("svc"), WithSeq("h-1"), WithFormat(FormatRaw)) // the handler writes JSON whatever the format
	if err != nil {
		t.Fatal(err)
	}
	lg := slog.New(NewHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lg.Debug("d", "n", 1, "f", 1.5, "b", true, "dur", time.Second, "err", errors.New("boom"), "any", []int{1, 2})
	lg.With("k", "v").WithGroup("req").With("id", 7).Info("grouped", "path", "/x", slog.Group("user", "name", "ann"))
	lg.WithGroup("empty").Warn("no attrs")
	lg.WithGroup("g1").WithGroup("g2").Error("nested", "a", "b\n\"c\"")
	lg.Info("skip empty", slog.Group("none"), slog.Attr{})
	w.Close()
	got := decodeLines(t, m.String())
	if len(got) != 5 {
		t.Fatalf("%d records: %s", len(got), m.String())
	}
	for i, r := range got {
		if r["source"] != "svc" || r["timestamp"] == nil || r["level"] == nil || r["message"] == nil {
			t.Errorf("record %d lacks base members: %v", i, r)
		}
		if r["seq"] != float64(i+1) || r["producer_id"] != "h-1" {
			t.Errorf("record %d stamp: %v", i, r)
		}
	}
	want := []string{
		`{"any":[1,2],"b":true,"dur":1000000000,"err":"boom","f":1.5,"level":"DEBUG","message":"d","n":1}`,
		`{"k":"v","level":"INFO","message":"grouped","req":{"id":7,"path":"/x","user":{"name":"ann"}}}`,
		`{"level":"WARN","message":"no attrs"}`,
		`{"g1":{"g2":{"a":"b\n\"c\""}},"level":"ERROR","message":"nested"}`,
		`{"level":"INFO","message":"skip empty"}`,
	}
	for i, r := range got {
		for _, k := range []string{"source", "timestamp", "producer_id", "seq", "sent_ns"} {
			delete(r, k)
		}
		b, _ := json.Marshal(r)
		// json.Marshal escapes differently from the want literals only in
		// '<', '>', '&', none of which appear here.
		if string(b) != want[i] {
			t.Errorf("record %d\n got %s\nwant %s", i, b, want[i])
		}
	}
}

func TestHandlerLevel(t *testing.T) {
	m, u := newMem(t, true, 0)
	w, _ := Dial(u)
	lg := slog.New(NewHandler(w, nil))
	lg.Debug("hidden")
	lg.Info("shown")
	w.Close()
	if got := decodeLines(t, m.String()); len(got) != 1 || got[0]["message"] != "shown" {
		t.Fatalf("got %v", got)
	}
}

// TestHandlerConcurrent: records from many goroutines never interleave and
// every one is stamped once (run with -race).
func TestHandlerConcurrent(t *testing.T) {
	u, s := listen(t, "unix")
	w, err := Dial(u, WithSeq("c"), WithBuffer(512))
	if err != nil {
		t.Fatal(err)
	}
	lg := slog.New(NewHandler(w, nil)).With("common", "x")
	const G, N = 8, 200
	var wg sync.WaitGroup
	for g := 0; g < G; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lg.WithGroup(fmt.Sprint("g", g))
			for i := 0; i < N; i++ {
				l.Info("m", "i", i)
			}
		}()
	}
	wg.Wait()
	w.Close()
	lines := s.waitLines(t, G*N)
	seen := map[uint64]bool{}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("invalid line %q", l)
		}
		st, ok := seqstamp.Find([]byte(l))
		if !ok || seen[st.Seq] {
			t.Fatalf("stamp %+v %v in %q", st, ok, l)
		}
		seen[st.Seq] = true
	}
	if len(seen) != G*N {
		t.Fatalf("%d distinct seqs", len(seen))
	}
}
