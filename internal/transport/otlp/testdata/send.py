"""send.py PROTOCOL ENDPOINT N PREFIX - log N records through Python's
OpenTelemetry SDK (the logging bridge, a batch processor and the OTLP
exporter of PROTOCOL, grpc or http) to ENDPOINT, then flush and exit 0.
Each record is a warning "PREFIX 000000" .. with an attribute user.id.
An https ENDPOINT is TLS: the SDK reads the CA and the client's certificate
and key from OTEL_EXPORTER_OTLP_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
and OTEL_EXPORTER_OTLP_CLIENT_KEY."""
import logging
import sys

from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource

proto, endpoint, n, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if proto == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

    exporter = OTLPLogExporter(endpoint=endpoint, insecure=not endpoint.startswith("https://"))
else:
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    exporter = OTLPLogExporter(endpoint=endpoint)

provider = LoggerProvider(resource=Resource.create({"service.name": "py-app"}))
provider.add_log_record_processor(BatchLogRecordProcessor(exporter, max_queue_size=n + 1, schedule_delay_millis=50))
log = logging.getLogger("py.shop")
log.setLevel(logging.DEBUG)
log.propagate = False
log.addHandler(LoggingHandler(level=logging.DEBUG, logger_provider=provider))
for i in range(n):
    log.warning("%s %06d", prefix, i, extra={"user.id": 42})
ok = provider.force_flush(30000)
provider.shutdown()
sys.exit(0 if ok else 1)
