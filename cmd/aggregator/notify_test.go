package main

import (
	"reflect"
	"strings"
	"testing"
)

// TestPackKeepsOrderAndLimit: many long listen URLs are split into
// datagrams systemd reads (at most notifyDatagramMax bytes), in order,
// with READY=1 after every address.
func TestPackKeepsOrderAndLimit(t *testing.T) {
	var states []string
	for i := range 100 {
		states = append(states, listenVar+"unix:///"+strings.Repeat("d", 90)+"/"+strings.Repeat("x", i))
	}
	states = append(states, metricsVar+"http://127.0.0.1:9100/metrics", "READY=1", "STATUS=0 records/s")
	grams := pack(states, notifyDatagramMax)
	if len(grams) < 2 {
		t.Fatalf("%d datagrams for %d bytes of states; want a split", len(grams), len(strings.Join(states, "\n")))
	}
	var got []string
	for i, g := range grams {
		if n := len(strings.Join(g, "\n")); n > notifyDatagramMax {
			t.Errorf("datagram %d is %d bytes, over %d", i, n, notifyDatagramMax)
		}
		got = append(got, g...)
	}
	if !reflect.DeepEqual(got, states) {
		t.Errorf("packed states differ from the input in content or order (READY=1 must follow every address)")
	}
}

func TestPackFewStatesOneDatagram(t *testing.T) {
	states := []string{listenVar + "tcp://127.0.0.1:4000", "READY=1", "STATUS=x"}
	if got := pack(states, notifyDatagramMax); !reflect.DeepEqual(got, [][]string{states}) {
		t.Errorf("pack = %q, want one datagram", got)
	}
}
