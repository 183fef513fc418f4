package record

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// The RFC 3164 header memo must never change the output: every record is
// compared with what a fresh encoder (which parses everything) produces for
// the same payload and metadata, on a network listener (hostname parsed)
// and on a local socket (not parsed), and across a switch between the two.
func TestHeaderMemoMatchesFreshParse(t *testing.T) {
	now := time.Now()
	stamp := now.Format(time.Stamp)
	hdr := "<14>" + stamp + " host app[42]: "
	local := "<14>" + stamp + " app[42]: "
	payloads := []string{
		hdr + "first message",
		hdr + "second message, memo used",
		hdr + "third with producer_id=p seq=3 sent_ns=5",
		hdr + "quote \" and backslash \\ fall back",
		hdr + "tab\tand non-ASCII é fall back",
		hdr + "back to plain",
		"<13>" + stamp + " host other: different header",
		hdr + "after a header change",
		hdr, // empty message: parser path
		"<14>" + stamp + " host app[42]:x no space after colon",
		"<14>" + stamp + " host : no app name",
		"<14>" + stamp + " host : no app name, memo used",
		"<14>" + stamp + " host app[42]:: double colon",
		"<14>" + stamp + " host app[42]:: double colon again",
		"<14>2026-11-23T04:37:27.246351+02:00 vm app: zoned",
		"<14>2026-11-23T04:37:27.246351+02:00 vm app: zoned again",
		"<14>2026-11-23T04:37:27.246351+02:00 vm app: zoned again\x00",
		"<14>pyapp[1]: no timestamp",
		"<14>pyapp[1]: no timestamp again",
		local + "local one",
		local + "local two",
		"<13>Nov 8 x",          // a failed timestamp attempt read past "<13>Nov "
		"<13>Nov 8 04:33:41 x", // so this one, with the same bytes before " 8", is parsed
		"<13>Nov 8 04:33:41 x y",
		"<13>" + stamp + " tag ended by a space",
		"<13>" + stamp + " tag ended by a space, memo used",
		"<30>" + stamp + " dockerd/3f2a1b9c[1234]: container tag",
		"<30>" + stamp + " dockerd/3f2a1b9c[1234]: container tag, memo used",
		"<30>" + stamp + " dockerd/3f2a1b9c[1235]: another pid",
		"<166> 2026-11-26T20:59:03Z vm srsapp[16296]: srslog's default",
		"<166> 2026-11-26T20:59:03Z vm srsapp[16296]: srslog's default, memo used",
		"<166> garbage here: a space and no timestamp",
		"<166> garbage here: a space and no timestamp, memo used",
		"<166> 2026-11-26T20:59:0 x: a timestamp attempt that read past the first one",
		hdr + "last",
	}
	used := 0
	shared := NewEncoder()
	for _, parseHost := range []bool{true, false, true} {
		m := &Meta{Transport: "udp", Listener: "udp://127.0.0.1:514", RecvNS: now.UnixNano(), ParseHostname: parseHost}
		m.Prepare()
		for i, p := range payloads {
			before := shared.memo
			got, gres := shared.Append(nil, []byte(p), m, FlagPartial)
			want, wres := NewEncoder().Append(nil, []byte(p), m, FlagPartial)
			if !bytes.Equal(got, want) || gres != wres {
				t.Fatalf("hostname %v, payload %d %q:\n memo  %s %+v\n fresh %s %+v", parseHost, i, p, got, gres, want, wres)
			}
			if before.ok && before.parseHost == parseHost && bytes.HasPrefix([]byte(p), before.hdr) &&
				plainJSON([]byte(p[len(before.hdr):])) {
				used++
			}
		}
	}
	if used < 20 {
		t.Fatalf("memo used for %d payloads, want at least 20 (the test would not exercise it)", used)
	}
}

func TestHeaderMemoExpires(t *testing.T) {
	now := time.Now()
	m := &Meta{RecvNS: now.UnixNano()}
	m.Prepare()
	hdr := "<14>" + now.Format(time.Stamp) + " app: "
	e := NewEncoder()
	e.Append(nil, []byte(hdr+"one"), m, 0)
	if !e.memo.ok {
		t.Fatal("header not memoized")
	}
	m.RecvNS += memoTTL + 1
	if _, _, ok := e.reuse3164(nil, []byte(hdr+"two"), m, 0); ok {
		t.Fatal("memo reused after its TTL")
	}
}

func BenchmarkAppendRFC3164SameHeader(b *testing.B) {
	now := time.Now()
	// The header has a hostname, as on a TCP or unix stream listener; the rest of
	// the metadata is what it was before ParseHostname existed, so that
	// results stay comparable.
	m := &Meta{Transport: "unix", Listener: "unix:///x", RecvNS: now.UnixNano(), ParseHostname: true}
	m.Prepare()
	hdr := "<14>" + now.Format(time.Stamp) + " vm producer-7262[7262]: "
	p := []byte(hdr + fmt.Sprintf("producer_id=p1 seq=%d sent_ns=%d log message padding padding", 12345, now.UnixNano()))
	e := NewEncoder()
	var dst []byte
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for i := 0; i < b.N; i++ {
		dst, _ = e.Append(dst[:0], p, m, 0)
	}
}
