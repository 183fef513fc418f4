// Command otelcol-logagg is a small OpenTelemetry Collector built from the
// Collector's own modules at one release (v0.161.0, the newest with which
// the contrib file exporter builds from the module proxy): the OTLP
// receiver, and the OTLP, OTLP/HTTP and file exporters. The tests and
// benchmarks of logagg's OTLP receivers and forwarder run it as the peer
// logagg is compared with and as a real endpoint to forward to.
//
// It is a module of its own so that the aggregator's go.mod does not take
// the Collector's dependency graph (Kubernetes clients, cloud detectors,
// some 250 modules); scripts/setup.sh builds it into .cache/tools.
//
//	otelcol-logagg --config collector.yaml
package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol-logagg", Description: "OpenTelemetry Collector for logagg's tests", Version: "0.161.0"},
		Factories: factories,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: confmap.ResolverSettings{
			ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
			DefaultScheme:     "file",
		}},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatal(err)
	}
}

func factories() (otelcol.Factories, error) {
	var f otelcol.Factories
	var err error
	f.Telemetry = otelconftelemetry.NewFactory()
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory(), otlpexporter.NewFactory(), otlphttpexporter.NewFactory())
	return f, err
}
