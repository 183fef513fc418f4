// Package otlpwire is what the OTLP receivers (internal/transport/otlp) and
// the OTLP forwarder (internal/forward/otlp) share of the OpenTelemetry
// protocol for logs: the protobuf field numbers of the messages they read
// and write by hand, the severity mapping, the export response, the gRPC
// method and a gRPC codec that passes messages through as bytes.
//
// Both sides encode and decode OTLP with google.golang.org/protobuf's
// protowire rather than generated types: a request is turned straight into
// the aggregator's JSON records (and records straight into a request)
// without building an object per LogRecord, which is where a generated
// decoder spends most of its time (docs/adr/0057).
package otlpwire

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// The gRPC service and method of the logs exporter (opentelemetry-proto
// collector/logs/v1/logs_service.proto).
const (
	Service    = "opentelemetry.proto.collector.logs.v1.LogsService"
	ExportPath = "/" + Service + "/Export"
	// HTTPPath is the OTLP/HTTP path of logs.
	HTTPPath = "/v1/logs"
)

// Field numbers (opentelemetry-proto v1: collector/logs/v1, logs/v1,
// common/v1, resource/v1).
const (
	// ExportLogsServiceRequest
	RequestResourceLogs = 1
	// ResourceLogs
	ResourceLogsResource  = 1
	ResourceLogsScopeLogs = 2
	ResourceLogsSchemaURL = 3
	// ResourceLogsInstrumentationLibraryLogs is the field that held scope
	// logs before OTLP 0.19; old senders still use it, and it has the
	// layout of ScopeLogs.
	ResourceLogsInstrumentationLibraryLogs = 1000
	// Resource
	ResourceAttributes             = 1
	ResourceDroppedAttributesCount = 2
	// ScopeLogs
	ScopeLogsScope      = 1
	ScopeLogsLogRecords = 2
	ScopeLogsSchemaURL  = 3
	// InstrumentationScope
	ScopeName                   = 1
	ScopeVersion                = 2
	ScopeAttributes             = 3
	ScopeDroppedAttributesCount = 4
	// LogRecord
	LogTimeUnixNano          = 1
	LogSeverityNumber        = 2
	LogSeverityText          = 3
	LogBody                  = 5
	LogAttributes            = 6
	LogDroppedAttributeCount = 7
	LogFlags                 = 8
	LogTraceID               = 9
	LogSpanID                = 10
	LogObservedTimeUnixNano  = 11
	LogEventName             = 12
	// KeyValue
	KeyValueKey   = 1
	KeyValueValue = 2
	// AnyValue (a oneof)
	AnyString = 1
	AnyBool   = 2
	AnyInt    = 3
	AnyDouble = 4
	AnyArray  = 5
	AnyKVList = 6
	AnyBytes  = 7
	// ArrayValue and KeyValueList
	ListValues = 1
	// ExportLogsServiceResponse
	ResponsePartialSuccess = 1
	// ExportLogsPartialSuccess
	PartialRejected     = 1
	PartialErrorMessage = 2
)

// Severity names: the short names of OpenTelemetry's log data model, one per
// range of four severity numbers (TRACE 1-4, DEBUG 5-8, INFO 9-12, WARN
// 13-16, ERROR 17-20, FATAL 21-24).
var severityNames = [...]string{"trace", "debug", "info", "warn", "error", "fatal"}

// SeverityName is the lower-case short name of severity number n ("info"
// for 9 to 12), or "" when n is unspecified (0) or out of range. The
// routing rules read these names as syslog severities (fatal as crit,
// trace as debug).
func SeverityName(n int64) string {
	if n < 1 || n > 24 {
		return ""
	}
	return severityNames[(n-1)/4]
}

// SyslogSeverity maps a syslog severity (0 emerg .. 7 debug) to a severity
// number as the log data model's appendix maps syslog: emerg FATAL, alert
// ERROR3, crit ERROR2, err ERROR, warning WARN, notice INFO2, info INFO,
// debug DEBUG. Out of range: 0 (unspecified).
func SyslogSeverity(sev int64) int32 {
	switch sev {
	case 0:
		return 21
	case 1:
		return 19
	case 2:
		return 18
	case 3:
		return 17
	case 4:
		return 13
	case 5:
		return 10
	case 6:
		return 9
	case 7:
		return 5
	}
	return 0
}

// SeverityNumberOfLevel maps a level name as producers write it ("info",
// "WARN", "error", "fatal", "debug", "trace", syslog names) to a severity
// number, or 0 when it names none.
func SeverityNumberOfLevel(level []byte) int32 {
	var buf [16]byte
	if len(level) > len(buf) {
		return 0
	}
	l := buf[:len(level)]
	for i, c := range level {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		l[i] = c
	}
	switch string(l) {
	case "trace":
		return 1
	case "debug":
		return 5
	case "info", "information", "informational":
		return 9
	case "notice":
		return 10
	case "warn", "warning":
		return 13
	case "err", "error":
		return 17
	case "crit", "critical":
		return 18
	case "alert":
		return 19
	case "fatal":
		return 21
	case "emerg", "emergency", "panic":
		return 21
	}
	return 0
}

// AppendResponse appends an ExportLogsServiceResponse: empty when nothing
// was rejected, else a partial success naming how many records were
// rejected and why.
func AppendResponse(b []byte, rejected int64, msg string) []byte {
	if rejected == 0 && msg == "" {
		return b
	}
	var ps []byte
	if rejected != 0 {
		ps = protowire.AppendTag(ps, PartialRejected, protowire.VarintType)
		ps = protowire.AppendVarint(ps, uint64(rejected))
	}
	if msg != "" {
		ps = protowire.AppendTag(ps, PartialErrorMessage, protowire.BytesType)
		ps = protowire.AppendString(ps, msg)
	}
	b = protowire.AppendTag(b, ResponsePartialSuccess, protowire.BytesType)
	return protowire.AppendBytes(b, ps)
}

// ParseResponse reads an ExportLogsServiceResponse: the records the
// server rejected (partial success) and its message. A malformed response
// is an error.
func ParseResponse(b []byte) (rejected int64, msg string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, "", protowire.ParseError(n)
		}
		b = b[n:]
		if num == ResponsePartialSuccess && typ == protowire.BytesType {
			ps, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, "", protowire.ParseError(n)
			}
			b = b[n:]
			for len(ps) > 0 {
				num, typ, n := protowire.ConsumeTag(ps)
				if n < 0 {
					return 0, "", protowire.ParseError(n)
				}
				ps = ps[n:]
				switch {
				case num == PartialRejected && typ == protowire.VarintType:
					v, n := protowire.ConsumeVarint(ps)
					if n < 0 {
						return 0, "", protowire.ParseError(n)
					}
					rejected = int64(v)
					ps = ps[n:]
				case num == PartialErrorMessage && typ == protowire.BytesType:
					v, n := protowire.ConsumeBytes(ps)
					if n < 0 {
						return 0, "", protowire.ParseError(n)
					}
					msg = string(v)
					ps = ps[n:]
				default:
					n := protowire.ConsumeFieldValue(num, typ, ps)
					if n < 0 {
						return 0, "", protowire.ParseError(n)
					}
					ps = ps[n:]
				}
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	return rejected, msg, nil
}
