package seqstamp

import "testing"

func TestRoundTrip(t *testing.T) {
	s := Stamp{Producer: "p3-991", Seq: 12345, SentNS: 1763845678123456789}
	json := append([]byte(`{"message":"x",`), AppendJSONFields(nil, s)...)
	json = append(json, `,"agg":{"recv_ns":1}}`...)
	text := []byte(`{"message":"` + string(AppendText(nil, s)) + ` hello","agg":{}}`)
	// rsyslog keeps a JSON payload as its message, escaped.
	escaped := []byte(`{"host":"h","message":"{\"message\":\"x\",\"producer_id\":\"p3-991\",\"seq\":12345,\"sent_ns\":1763845678123456789}"}`)
	for name, line := range map[string][]byte{"json": json, "text": text, "escaped json": escaped} {
		got, ok := Find(line)
		if !ok || got != s {
			t.Errorf("%s: Find(%s) = %+v, %v; want %+v", name, line, got, ok, s)
		}
	}
	if _, ok := Find([]byte(`{"message":"no stamp"}`)); ok {
		t.Error("found a stamp where there is none")
	}
	if _, ok := Find([]byte(`{"producer_id":"p1"}`)); ok {
		t.Error("a stamp without seq must not be found")
	}
}

// SentNS reads what Find reads as SentNS, in both forms, and 0 unstamped.
func TestSentNSAgreesWithFind(t *testing.T) {
	st := Stamp{Producer: "p-1", Seq: 7, SentNS: 1764201234567890123}
	for _, line := range [][]byte{
		append(append([]byte(`{`), AppendJSONFields(nil, st)...), `,"message":"x"}`...),
		append(append([]byte(`<13>Nov 27 06:00:00 host app: `), AppendText(nil, st)...), " x"...),
	} {
		got, ok := Find(line)
		if !ok || SentNS(line) != got.SentNS || got.SentNS != st.SentNS {
			t.Errorf("%s: SentNS %d, Find %+v", line, SentNS(line), got)
		}
	}
	if n := SentNS([]byte(`{"message":"no stamp"}`)); n != 0 {
		t.Errorf("unstamped line: SentNS %d, want 0", n)
	}
}
