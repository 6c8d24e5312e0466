"""OpenTelemetry traces, an optional extra (`pip install nemo_gym[traces]`; docs/architecture.md, "Traces").

`switch` is all the rest of the package imports: one module-level value, None while traces are off, so code on a
request's path pays one attribute check and opentelemetry is never imported. `start` turns traces on in a process
(`+traces.otlp_endpoint=...`); `otel` and the span modules behind it import opentelemetry and load only then.
"""
