//go:build tools

// Package tools pins modules that packages of this repository start using in
// parallel, so `go mod tidy` keeps them while those packages are being built.
package tools

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/Shopify/toxiproxy/v2"
	_ "github.com/Shopify/toxiproxy/v2/toxics"
	_ "github.com/leodido/go-syslog/v4/rfc3164"
	_ "github.com/leodido/go-syslog/v4/rfc5424"
	_ "github.com/oklog/run"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "golang.org/x/sys/unix"
	_ "gonum.org/v1/plot/plotter"
	_ "gonum.org/v1/plot/vg"
	_ "gopkg.in/yaml.v3"
)
