package report

import (
	"encoding/json"
	"testing"
)

// A result says which latency method measured it in its params, saved as
// one object now and as a list of one per size before; without a method
// the report warns that the figures are the previous method's.
func TestLatencyMethodFromEitherParamsShape(t *testing.T) {
	for _, c := range []struct {
		name, params, want string
	}{
		{"one object", `{"sizes":[4096],"method":"scheduled"}`, "scheduled"},
		{"list per size", `[{"size":4096,"method":"scheduled"},{"size":100,"method":"scheduled"}]`, "scheduled"},
		{"previous method, object", `{"size":4096}`, ""},
		{"previous method, list", `[{"size":4096}]`, ""},
		{"absent", `null`, ""},
	} {
		if got := latencyMethod(json.RawMessage(c.params)); got != c.want {
			t.Errorf("%s: method %q, want %q", c.name, got, c.want)
		}
	}
}
