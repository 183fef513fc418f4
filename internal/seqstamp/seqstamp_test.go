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
