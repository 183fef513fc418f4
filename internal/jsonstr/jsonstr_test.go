package jsonstr

import (
	"encoding/json"
	"testing"
)

func TestAppendEscaped(t *testing.T) {
	for _, tc := range []struct {
		in, want         string
		badUTF8, control bool
	}{
		{"plain", "plain", false, false},
		{"q\"b\\", `q\"b\\`, false, false},
		{"l1\nl2\r\t", `l1\nl2\r\t`, false, false},
		{"nul\x00x\x1f", `nul\u0000x\u001f`, false, true},
		{"caf\xe9", `caf\ufffd`, true, false},
		{"ünïcødé ✓", "ünïcødé ✓", false, false},
	} {
		got, bad, ctl := AppendEscaped(nil, []byte(tc.in))
		if string(got) != tc.want || bad != tc.badUTF8 || ctl != tc.control {
			t.Errorf("%q: got %q bad=%v ctl=%v, want %q %v %v", tc.in, got, bad, ctl, tc.want, tc.badUTF8, tc.control)
		}
		if !json.Valid(append(append([]byte{'"'}, got...), '"')) {
			t.Errorf("%q: %q is not a valid JSON string body", tc.in, got)
		}
		if s := AppendEscapedString(nil, tc.in); string(s) != tc.want {
			t.Errorf("AppendEscapedString(%q) = %q", tc.in, s)
		}
	}
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { dst = AppendEscapedString(dst[:0], "caf\xe9 \"x\"\n") }); n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}
