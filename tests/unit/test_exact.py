"""Exact-length prompts (workload/exact/): token counters (in-process, a local tokenizer.json, a server's
/tokenize), calibrated word units and the seeded pool that builds prompts of exact token lengths."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from servescope.emulator.tokenizer import get_tokenizer
from servescope.errors import ConfigError
from servescope.workload.exact.counter import LocalCounter
from servescope.workload.exact.units import ANCHOR, UnitPool, approximate_units, calibrate_units


class BuiltinCounter:
    """The emulator's own tokenizer (servescope.emulator.tokenizer), counted in-process: the real thing, no HTTP."""

    label = "exact (builtin)"

    def __init__(self, bos: int = 0) -> None:
        self.tok = get_tokenizer()
        self.bos = bos

    async def count(self, texts: list[str]) -> list[int]:
        return [self.bos + self.tok.count(t) for t in texts]

    async def close(self) -> None:
        return None


def test_calibrated_units_build_exact_lengths_builtin_tokenizer() -> None:
    counter = BuiltinCounter(bos=1)  # a BOS on every count, as vLLM's /tokenize adds: differences cancel it
    units = asyncio.run(calibrate_units(counter))
    assert units.exact and units.anchor_cost == 1 + get_tokenizer().count(ANCHOR)
    rng = np.random.default_rng(3)
    targets = rng.integers(1, 3000, size=200)
    pool = UnitPool(units, n_prompts=200, max_tokens=int(targets.max()), seed=7)
    texts = pool.texts(targets)
    tok = get_tokenizer()
    assert [tok.count(t) - tok.count(ANCHOR) for t in texts] == targets.tolist()
    assert len(set(texts)) == 200
    # distinct starts: no two prompts share the first 8 words after the anchor
    heads = {" ".join(t.split()[1:9]) for t in texts}
    assert len(heads) == 200


def test_pool_is_seeded() -> None:
    units = asyncio.run(calibrate_units(BuiltinCounter()))
    a = UnitPool(units, n_prompts=10, max_tokens=64, seed=1).texts([64] * 10)
    b = UnitPool(units, n_prompts=10, max_tokens=64, seed=1).texts([64] * 10)
    c = UnitPool(units, n_prompts=10, max_tokens=64, seed=2).texts([64] * 10)
    assert a == b and a != c


def _train_bpe(path: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from servescope.workload.random import WORDS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = np.random.default_rng(0)
    corpus = [" ".join(WORDS[i] for i in rng.integers(0, 60, size=50)) for _ in range(200)]
    tok.train_from_iterator(corpus, trainer)
    out = path / "tokenizer.json"
    tok.save(str(out))
    return out


def test_local_hf_tokenizer_exact(tmp_path: Path) -> None:
    """A byte-level BPE where most words are several tokens: costs vary, the pool still hits every length."""
    path = _train_bpe(tmp_path)
    counter = LocalCounter(str(tmp_path))  # a folder holding tokenizer.json
    units = asyncio.run(calibrate_units(counter))
    assert units.exact, units.notes
    assert (units.costs > 1).any() and (units.costs == 1).any()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    base = len(tok.encode(ANCHOR, add_special_tokens=False).ids)
    targets = [1, 2, 3, 5, 17, 100, 1024, 999]
    texts = UnitPool(units, n_prompts=len(targets), max_tokens=1024, seed=0).texts(targets)
    assert [len(tok.encode(t, add_special_tokens=False).ids) - base for t in texts] == targets


def test_local_tokenizer_missing_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tokenizer\.json"):
        LocalCounter(str(tmp_path))


def test_approximate_units_when_not_additive() -> None:
    class Merging(BuiltinCounter):
        label = "exact (merging)"

        async def count(self, texts: list[str]) -> list[int]:  # long texts count fewer than their parts
            return [n - (n // 100) for n in await super().count(texts)]

    units = asyncio.run(calibrate_units(Merging()))
    assert not units.exact and "not additive" in units.label and units.notes
    approx = approximate_units("why")
    assert not approx.exact and approx.notes == ["why"] and (approx.costs == 1).all()


@pytest.mark.parametrize("second", ["count", "post"])
def test_server_counter_asks_again_when_a_pooled_connection_was_closed_by_the_server(second: str) -> None:
    """A real loopback server that answers the first /tokenize on a connection and closes it on
    the next request, unanswered (what an idle keep-alive close racing with reuse looks like). The
    second call is a count or a JSON call (llama.cpp's /apply-template goes that way): both ask again."""
    import socket
    import threading

    from servescope.workload.exact.counter import ServerCounter

    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    answered: list[int] = []

    def serve() -> None:
        for _ in range(2):  # the first connection (answered once, then dropped), then a fresh one
            conn, _ = lsock.accept()
            with conn:
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += conn.recv(65536)
                head, _, body = buf.partition(b"\r\n\r\n")
                length = int(
                    next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
                )
                while len(body) < length:
                    body += conn.recv(65536)
                msg = b'{"count": 3, "tokens": [1, 2, 3]}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg)
                )
                answered.append(1)
                conn.recv(65536)  # the next request on this connection: dropped, unanswered
        lsock.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()

    async def go() -> list[int]:
        counter = ServerCounter(f"http://127.0.0.1:{port}", "m", {}, "/tokenize", "prompt", parallel=1)
        try:
            first = await counter.count(["one"])
            if second == "count":
                return [*first, *await counter.count(["two"])]
            doc = await counter._post("/apply-template", {"messages": []})
            return [*first, len(doc["tokens"])]
        finally:
            if counter._session is not None:
                await counter._session.close()

    assert asyncio.run(go()) == [3, 3]
    t.join(5)
    assert len(answered) == 2  # the second answer came on a fresh connection
