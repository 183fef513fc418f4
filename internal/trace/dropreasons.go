package trace

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

var symbolicRe = regexp.MustCompile(`\{ (\d+), "([A-Z0-9_]+)" \}`)

// DropReasons reads the names of enum skb_drop_reason (the keys of
// skb_drops' @drops map) from the kfree_skb tracepoint's format file; the
// numbers differ between kernel versions, so they are never hard-coded.
func DropReasons() (map[int]string, error) {
	b, err := os.ReadFile(filepath.Join(TracefsDir, "events/skb/kfree_skb/format"))
	if err != nil {
		return nil, fmt.Errorf("trace: drop reasons: %w", err)
	}
	return parseDropReasons(b), nil
}

func parseDropReasons(format []byte) map[int]string {
	out := map[int]string{}
	for _, m := range symbolicRe.FindAllSubmatch(format, -1) {
		if n, err := strconv.Atoi(string(m[1])); err == nil {
			out[n] = string(m[2])
		}
	}
	return out
}
