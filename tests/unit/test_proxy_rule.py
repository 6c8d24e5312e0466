"""The one proxy-selection rule (nemo_gym.proxies.proxy_for), case by case: which variable, NO_PROXY's entries,
loopback always direct, and a bad proxy URL refused without showing its credentials."""

import base64

import pytest

from nemo_gym.errors import ConfigError
from nemo_gym.proxies import Proxy, proxy_for

PROXY = "http://proxy.corp:3128"


@pytest.mark.parametrize("scheme, host, port, environ, expected", [
    ("https", "api.openai.com", 443, {"HTTPS_PROXY": PROXY}, ("proxy.corp", 3128, "HTTPS_PROXY")),
    ("https", "api.openai.com", 443, {"HTTP_PROXY": PROXY}, None),  # the scheme's own variable only
    ("http", "vllm.lan", 8000, {"HTTP_PROXY": PROXY}, ("proxy.corp", 3128, "HTTP_PROXY")),
    ("https", "a.example", 443, {"https_proxy": "http://low:1", "HTTPS_PROXY": PROXY}, ("low", 1, "https_proxy")),
    ("https", "a.example", 443, {"https_proxy": "", "HTTPS_PROXY": PROXY}, ("proxy.corp", 3128, "HTTPS_PROXY")),
    ("https", "a.example", 443, {"HTTPS_PROXY": "proxy.corp"}, ("proxy.corp", 80, "HTTPS_PROXY")),  # no scheme
    ("https", "a.example", 443, {}, None),
], ids=["https", "http_var_not_for_https", "http", "lower_case_wins", "empty_lower_case", "bare_host", "unset"])
def test_the_variable_of_the_scheme(scheme: str, host: str, port: int, environ: dict[str, str],
                                    expected: tuple[str, int, str] | None) -> None:
    proxy = proxy_for(scheme, host, port, environ)
    assert (proxy.host, proxy.port, proxy.variable) == expected if proxy else expected is None


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost", "LOCALHOST."])
def test_loopback_is_always_direct(host: str) -> None:
    assert proxy_for("http", host, 8000, {"HTTP_PROXY": PROXY, "http_proxy": PROXY}) is None


@pytest.mark.parametrize("no_proxy, host, port, direct", [
    ("*", "anything.example", 443, True),
    ("example.com", "example.com", 443, True),
    ("example.com", "api.example.com", 443, True),
    (".example.com", "api.example.com", 443, True),
    (".example.com", "example.com", 443, True),
    ("example.com", "notexample.com", 443, False),
    ("Example.COM", "api.example.com", 443, True),
    ("example.com:8443", "example.com", 8443, True),
    ("example.com:8443", "example.com", 443, False),
    ("10.0.0.0/8", "10.1.2.3", 443, True),
    ("10.0.0.0/8", "11.1.2.3", 443, False),
    ("10.1.2.3", "10.1.2.3", 443, True),
    ("fd00::/8", "fd00::5", 443, True),
    ("[fd00::5]:443", "fd00::5", 443, True),
    ("[fd00::5]:443", "fd00::5", 80, False),
    (" other.org , example.com ", "example.com", 443, True),
    ("", "example.com", 443, False),
])
def test_no_proxy_entries(no_proxy: str, host: str, port: int, direct: bool) -> None:
    proxy = proxy_for("https", host, port, {"HTTPS_PROXY": PROXY, "NO_PROXY": no_proxy})
    assert (proxy is None) == direct


def test_lower_case_no_proxy_wins() -> None:
    environ = {"HTTPS_PROXY": PROXY, "no_proxy": "a.example", "NO_PROXY": "b.example"}
    assert proxy_for("https", "a.example", 443, environ) is None
    assert proxy_for("https", "b.example", 443, environ) is not None


def test_credentials_become_proxy_authorization_and_stay_out_of_repr() -> None:
    proxy = proxy_for("https", "a.example", 443, {"HTTPS_PROXY": "http://us%40er:p%3Ass@proxy.corp:3128"})
    assert isinstance(proxy, Proxy)
    assert proxy.authorization == "Basic " + base64.b64encode(b"us@er:p:ss").decode()
    assert "p:ss" not in repr(proxy) and "p%3Ass" not in repr(proxy) and proxy.authorization not in repr(proxy)
    assert proxy.display == "proxy.corp:3128 (from HTTPS_PROXY)"


@pytest.mark.parametrize("value, says", [
    ("socks5://user:s3cret@proxy.corp:1080", "only http:// proxies are supported"),
    ("https://user:s3cret@proxy.corp:3128", "only http:// proxies are supported"),
    ("http://user:s3cret@proxy.corp:99999", "the port is not a number"),
    ("http://user:s3cret@:3128", "no proxy host"),
])
def test_an_unusable_proxy_is_a_config_error_without_its_credentials(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        proxy_for("https", "a.example", 443, {"HTTPS_PROXY": value})
    assert says in str(caught.value) and "HTTPS_PROXY" in str(caught.value)
    assert "s3cret" not in str(caught.value) and "user" not in str(caught.value)
