"""What the server reports about itself: Prometheus metrics, OpenTelemetry tracing and request traces, the
access log's usage fields, process CPU time and the engine monitor."""
