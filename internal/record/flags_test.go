package record

import (
	"testing"

	"github.com/ipclab/logagg/internal/metrics"
)

// Listeners count a record's flags under decode_errors_total{kind=FlagName},
// so every kind the metrics package documents must be a flag name, and
// every flag must have a documented kind.
func TestFlagNamesAreMetricKinds(t *testing.T) {
	kinds := []string{metrics.KindMalformedJSON, metrics.KindInvalidUTF8, metrics.KindNUL, metrics.KindControl,
		metrics.KindTruncated, metrics.KindContinuation, metrics.KindPartial, metrics.KindSyslog,
		metrics.KindReservedKey, metrics.KindDuplicateKey, metrics.KindNotObject, metrics.KindFraming}
	names := map[string]bool{}
	for i := 0; i < NumFlags; i++ {
		names[FlagName(i)] = true
		if got := Flags(1 << i).Names(); len(got) != 1 || got[0] != FlagName(i) {
			t.Errorf("bit %d: Names() = %v, FlagName = %q", i, got, FlagName(i))
		}
	}
	for _, k := range kinds {
		if !names[k] {
			t.Errorf("metrics kind %q is not a flag name", k)
		}
	}
	if len(kinds) != NumFlags {
		t.Errorf("%d metric kinds for %d flags", len(kinds), NumFlags)
	}
	if FlagName(NumFlags) != "" || FlagName(-1) != "" {
		t.Error("FlagName out of range is not empty")
	}
}
