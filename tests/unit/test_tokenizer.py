"""The built-in tokenizer: lossless, prefix-stable, word ids concatenate, counts are honest."""

from __future__ import annotations

import random

from servescope.emulator.tokenizer import Tokenizer, get_tokenizer

SAMPLES = [
    "",
    "Hello, world!",
    "9.11 and 9.8, which is greater? Explain your reasoning",
    "  leading spaces\n\n\ttabs and\r\nCRLF  ",
    "héllo 日本語 — emoji 🙂 done",
    "DeepSeek-R1 671B on 8xH100: ITL ~50 ms, KV=151k tokens.",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa zzzzzz QQQQ",
]


def test_roundtrip_is_lossless() -> None:
    tk = get_tokenizer()
    for s in SAMPLES:
        assert tk.decode(tk.encode(s)) == s


def test_prefix_stability() -> None:
    tk = get_tokenizer()
    for s in SAMPLES:
        if not s.isascii():
            continue
        ids = tk.encode(s)
        for k in range(len(ids) + 1):
            assert tk.encode(tk.decode(ids[:k])) == ids[:k], (s, k)


def test_word_ids_concatenate_to_exact_lengths() -> None:
    tk = get_tokenizer()
    words = tk.word_ids()
    assert len(words) > 500
    rng = random.Random(7)
    for n in (1, 2, 17, 1024):
        ids = [rng.choice(words) for _ in range(n)]
        assert tk.encode(tk.decode(ids)) == ids


def test_counts_are_honest() -> None:
    tk = get_tokenizer()
    assert tk.count("the problem was found in the system") == 7
    assert tk.count("12345") == 5
    assert tk.count("a, b.") == 4
    # unknown words cost more than one token but not one per letter
    n = tk.count("supercalifragilistic")
    assert 4 <= n <= 10


def test_deterministic_across_instances() -> None:
    a, b = Tokenizer(), Tokenizer()
    s = SAMPLES[2] + SAMPLES[5]
    assert a.encode(s) == b.encode(s)
    assert a.vocab_size == b.vocab_size
    assert a.decode([a.eos_id]) == ""
