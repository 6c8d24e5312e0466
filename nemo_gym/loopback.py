"""The project's one rule for "this machine": which hosts are loopback. Standard library only, so every side may
import it (the proxy rule, config checks, the viewer, and the weight transport inside vLLM's processes)."""

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine: `localhost` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
