"""The one base-URL helper: every spelling of a target gives the same API base and server root."""

from __future__ import annotations

import pytest

from servescope.urls import api_base, server_root

SPELLINGS = ["http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/", " http://h:1/v1// ", "http://h:1//"]


@pytest.mark.parametrize("url", SPELLINGS)
def test_every_spelling_gives_one_base_and_one_root(url: str) -> None:
    assert api_base(url) == "http://h:1/v1"
    assert server_root(url) == "http://h:1"


def test_a_path_prefix_is_kept() -> None:
    assert server_root("https://gw.example/llm/v1/") == "https://gw.example/llm"
    assert api_base("https://gw.example/llm") == "https://gw.example/llm/v1"
    assert server_root("http://h:1/v1x") == "http://h:1/v1x"  # only a whole /v1 segment goes


def test_the_helpers_round_trip() -> None:
    for url in SPELLINGS:
        assert api_base(server_root(url)) == api_base(url)
        assert server_root(api_base(url)) == server_root(url)
