"""The same tiny model on two real engines: same greedy text, same token counts.

This checks the model generator itself (tests/support/tiny_model.py): the GGUF's q/k permutation, the
vocabulary and merges, and the chat template must all match the Hugging Face copy, or the two engines
would disagree on the very first token.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.support.real_servers import RealServer
from tests.support.tiny_model import HUB_REPO_ID

pytestmark = pytest.mark.e2e


def _complete(srv: RealServer, model: str, api: str, extra: dict) -> dict:
    body: dict = {"model": model, "max_tokens": 24, "temperature": 0, **extra}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "the quick brown fox"}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = "the quick brown fox"
        path = "/v1/completions"
    req = urllib.request.Request(
        srv.root + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_greedy_output_identical_on_llama_server_and_transformers(
    llama_server: RealServer, hf_serve: RealServer, api: str
) -> None:
    a = _complete(llama_server, "tiny-llama", api, {"ignore_eos": True})
    b = _complete(hf_serve, HUB_REPO_ID, api, {})
    key = "message" if api == "chat" else None
    text_a = a["choices"][0]["message"]["content"] if key else a["choices"][0]["text"]
    text_b = b["choices"][0]["message"]["content"] if key else b["choices"][0]["text"]
    assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"] == 24
    assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]  # same tokenizer and template
    assert text_a == text_b and text_a.strip(), (text_a, text_b)
