"""$ per 1M tokens against a hand computation."""

from __future__ import annotations

import pytest

from servescope.errors import ConfigError
from servescope.results.cost import GPU_PRICES, cost_block, resolve_price, usd_per_million


def test_cost_matches_hand_computation() -> None:
    # 8 GPUs at $2.50/h = $20/h. 1,000 output tok/s = 3.6M tokens/h -> $20 / 3.6 = $5.5556 per 1M.
    price = resolve_price(2.50, 8, None)
    assert price is not None and price.usd_per_hour == 20.0
    block = cost_block(
        {"input_tokens_per_s": 4000.0, "output_tokens_per_s": 1000.0, "total_tokens_per_s": 5000.0}, price
    )
    assert block["usd_per_1m_output_tokens"] == pytest.approx(20 / 3.6)
    assert block["usd_per_1m_input_tokens"] == pytest.approx(20 / 14.4)  # 4,000 tok/s = 14.4M/h
    assert block["usd_per_1m_total_tokens"] == pytest.approx(20 / 18.0)  # 5,000 tok/s = 18M/h
    assert block["usd_per_1m_total_tokens"] == pytest.approx(1.1111, abs=1e-4)


def test_formula_and_zero_throughput() -> None:
    assert usd_per_million(98.32, 2500.0) == pytest.approx(98.32 / (2500 * 3600) * 1e6)
    assert usd_per_million(10.0, 0.0) is None
    assert usd_per_million(10.0, None) is None


def test_named_prices_and_errors() -> None:
    p = resolve_price(None, 8, "h100-aws-p5")
    assert p is not None and p.usd_per_hour == pytest.approx(98.32)
    assert "p5.48xlarge" in p.source
    for entry in GPU_PRICES.values():
        assert entry.usd_per_gpu_hour > 0 and entry.source.startswith("https://") and entry.as_of
    assert resolve_price(None, None, None) is None
    with pytest.raises(ConfigError):
        resolve_price(None, None, "nope")
    with pytest.raises(ConfigError):
        resolve_price(2.0, 1, "h100-aws-p5")
    assert resolve_price(None, 8, None) is None  # --gpus alone: throughput per GPU, no price
    with pytest.raises(ConfigError):
        resolve_price(None, 0, None)
    with pytest.raises(ConfigError):
        resolve_price(-1.0, 1, None)
