"""The `traces` section: where OpenTelemetry spans go (nemo_gym.traces), read by ng_run, which hands it to every
server it starts, and by the collectors for their own spans. Off unless an endpoint is named."""

from pydantic import Field

from nemo_gym.config.typed import Settings, Text

OTLP_TRACES_PATH = "/v1/traces"


class TracesSettings(Settings):
    otlp_endpoint: Text | None = None
    """Export OpenTelemetry spans by OTLP over HTTP/protobuf to this collector, e.g. http://127.0.0.1:4318 (/v1/traces
    is added unless the URL ends with it): the servers ng_run and ng_e2e_collect_rollouts start, and the rollouts of
    ng_collect_rollouts and ng_e2e_collect_rollouts. Null: no traces, and no tracing work. Needs the `traces` extra."""
    service_names: dict[str, Text] = Field(default_factory=dict)
    """service.name of each process by server instance name (or command, e.g. ng_collect_rollouts); default: that
    name itself."""

    @property
    def traces_url(self) -> str | None:
        """Where spans are POSTed, or None when traces are off."""
        if not self.otlp_endpoint:
            return None
        endpoint = self.otlp_endpoint.rstrip("/")
        return endpoint if endpoint.endswith(OTLP_TRACES_PATH) else endpoint + OTLP_TRACES_PATH

    def service_name(self, name: str) -> str:
        return self.service_names.get(name, name)
