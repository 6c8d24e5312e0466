"""Which proxy, if any, a request goes through: the one rule for HTTPS_PROXY, HTTP_PROXY and NO_PROXY.

Loopback hosts (our own servers: `localhost`, 127.0.0.0/8, ::1) never go through a proxy, whatever the environment
says: test and CI machines often set proxy variables for the outside world. For any other host the variables are
read as curl and httpx read them: `https_proxy` / `HTTPS_PROXY` for https URLs, `http_proxy` / `HTTP_PROXY` for http
ones (the lower-case form wins when both are set), and `no_proxy` / `NO_PROXY`, a comma-separated list of hosts that
go direct: `*` (every host), a host name (itself and its subdomains, with or without a leading dot), an IP address or
a CIDR range, each optionally with `:port`.

A proxy is an http:// URL (the scheme may be left out), with optional credentials: `http://user:password@proxy:3128`.
The credentials become a Proxy-Authorization header and never appear in a message: `Proxy.display` is host:port.
"""

import base64
import ipaddress
import os
from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import unquote, urlsplit

from nemo_gym.errors import ConfigError
from nemo_gym.loopback import is_loopback

# The variables of each URL scheme, in the order they are looked up.
PROXY_VARIABLES = {"https": ("https_proxy", "HTTPS_PROXY"), "http": ("http_proxy", "HTTP_PROXY")}
NO_PROXY_VARIABLES = ("no_proxy", "NO_PROXY")


class ProxyConfigError(ConfigError):
    """A proxy variable that cannot be used (not an http:// proxy, no host, a bad port)."""


@dataclass(frozen=True)
class Proxy:
    """A forward proxy: where it listens, the variable that named it, and its Proxy-Authorization value (kept out of
    repr, since it holds the credentials)."""

    host: str
    port: int
    variable: str
    authorization: str | None = field(default=None, repr=False)

    @property
    def display(self) -> str:
        """host:port and the variable it came from, for messages: never the credentials."""
        name = f"[{self.host}]" if ":" in self.host else self.host
        return f"{name}:{self.port} (from {self.variable})"


def _without_credentials(value: str) -> str:
    return value.rsplit("@", 1)[-1] if "@" in value else value


def parse_proxy(value: str, variable: str) -> Proxy:
    """The proxy a variable names; ProxyConfigError (showing the URL without its credentials) when it is unusable."""
    parts = urlsplit(value if "://" in value else f"http://{value}")
    shown = f"{variable}={_without_credentials(value)!r}"
    if parts.scheme != "http":
        raise ProxyConfigError(f"{shown}: only http:// proxies are supported (HTTPS goes through them as a CONNECT "
                               f"tunnel), not {parts.scheme}://")
    try:
        port = parts.port or 80
    except ValueError:
        raise ProxyConfigError(f"{shown}: the port is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise ProxyConfigError(f"{shown}: no proxy host")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode()
    return Proxy(host=parts.hostname, port=port, variable=variable, authorization=authorization)


def _split_entry(entry: str) -> tuple[str, str]:
    """(name, port) of a NO_PROXY entry: `host`, `host:port`, an IPv6 address or range, `[IPv6]:port`."""
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, rest.removeprefix(":")
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, port
    return entry, ""


def _entry_matches(entry: str, host: str, port: int) -> bool:
    """Whether one NO_PROXY entry covers host:port (`host` in lower case, without a trailing dot)."""
    name, entry_port = _split_entry(entry)
    if entry_port and entry_port != str(port):
        return False
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(name, strict=False)
    except ValueError:
        pass
    name = name.lstrip(".").rstrip(".").lower()
    return bool(name) and (host == name or host.endswith("." + name))


def bypasses_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether NO_PROXY's value `no_proxy` sends host:port direct."""
    host = host.lower().rstrip(".")
    entries = [entry.strip() for entry in no_proxy.split(",") if entry.strip()]
    return "*" in entries or any(_entry_matches(entry, host, port) for entry in entries)


def proxy_for(scheme: str, host: str, port: int, environ: Mapping[str, str] = os.environ) -> Proxy | None:
    """The proxy a request to scheme://host:port goes through, or None to connect direct."""
    if is_loopback(host):
        return None
    variable = next((name for name in PROXY_VARIABLES.get(scheme, ()) if environ.get(name)), None)
    if variable is None:
        return None
    no_proxy = next((environ[name] for name in NO_PROXY_VARIABLES if environ.get(name)), "")
    if bypasses_proxy(host, port, no_proxy):
        return None
    return parse_proxy(environ[variable], variable)
