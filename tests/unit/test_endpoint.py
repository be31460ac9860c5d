import pytest

from evalkit.client.model_discovery import ServedModel, resolve_model
from evalkit.config.endpoint import display_url, normalize_base_url, server_root
from evalkit.errors import EndpointError


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8000/",
        "http://127.0.0.1:8000/v1",
        "http://127.0.0.1:8000/v1/",
        "http://127.0.0.1:8000/v1/completions",
        "http://127.0.0.1:8000/v1/chat/completions",
        "127.0.0.1:8000",
    ],
)
def test_normalize_base_url(url):
    assert normalize_base_url(url) == "http://127.0.0.1:8000/v1"


def test_normalize_keeps_path_prefix_and_root():
    assert normalize_base_url("https://h.example/proxy/v1/completions") == "https://h.example/proxy/v1"
    assert server_root("http://h:1/proxy/v1") == "http://h:1/proxy"


def test_bad_url_is_one_line_error():
    with pytest.raises(EndpointError, match="not an http"):
        normalize_base_url("ftp://x/v1")


def test_display_url_strips_credentials():
    assert display_url("http://user:secret@h:9/v1") == "http://h:9/v1"


def test_resolve_model():
    ms = [ServedModel("a", 4096), ServedModel("b", None)]
    assert resolve_model(ms, "b", "http://h/v1").id == "b"
    with pytest.raises(EndpointError, match="served: a, b"):
        resolve_model(ms, "c", "http://h/v1")
    with pytest.raises(EndpointError, match="pick one with --model"):
        resolve_model(ms, None, "http://h/v1")
    assert resolve_model(ms[:1], None, "http://h/v1").id == "a"
