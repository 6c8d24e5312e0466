"""Secret redaction for anything that leaves a process: the head server's config endpoint, logs, manifests."""

import re
from typing import Any

REDACTED = "***REDACTED***"

# A key is secret when one of its underscore/dash separated words is one of these (so `max_tokens` is not).
_SECRET_WORDS = re.compile(r"(?:^|[_\-.])(api_?key|apikey|token|secret|password|passwd|credentials?)(?:$|[_\-.])")


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_WORDS.search(key.lower()))


def redact_secrets(obj: Any) -> Any:
    """Return a copy of `obj` where every string value under a secret-looking key is replaced.

    Only strings are redacted: flags such as `return_token_id_information: true` are not secrets.
    """
    if isinstance(obj, dict):
        return {
            k: (REDACTED if isinstance(v, str) and v and is_secret_key(str(k)) else redact_secrets(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact_secrets(v) for v in obj]
    return obj


def secret_values(obj: Any) -> set[str]:
    """All string values stored under secret-looking keys, so log lines can be scrubbed of them."""
    found: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, str) and v and is_secret_key(str(k)):
                found.add(v)
            else:
                found |= secret_values(v)
    elif isinstance(obj, list):
        for v in obj:
            found |= secret_values(v)
    # Placeholder values are not secrets worth scrubbing (and would mangle every log line).
    return {s for s in found if len(s) >= 4}


def _scrub(obj: Any, secrets: set[str]) -> Any:
    if isinstance(obj, str):
        for secret in secrets:
            obj = obj.replace(secret, REDACTED)
        return obj
    if isinstance(obj, dict):
        return {k: _scrub(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v, secrets) for v in obj]
    return obj


def redact_everywhere(obj: Any) -> Any:
    """`redact_secrets`, and every copy of a secret elsewhere (an interpolation, a URL holding a token) too."""
    return _scrub(redact_secrets(obj), secret_values(obj))
