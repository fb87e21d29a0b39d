"""Serving cost: dollars per million tokens from a GPU-hour price and a measured throughput.

    usd_per_1m_tokens = gpu_hour_price × gpus / (tokens_per_s × 3600) × 1e6

computed three times per run, with input, output and total (input + output) tokens/s. Each figure
charges the whole deployment's hourly cost to that kind of token (the seeds' "$/1K tokens" divide the
hourly price by total tokens/s); they are alternatives, not parts that add up. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servescope.errors import ConfigError
from servescope.results.schema import Cost, Throughput

__all__ = ["GPU_PRICES", "GpuPrice", "Price", "cost_block", "resolve_price", "usd_per_million"]


@dataclass(frozen=True)
class GpuPrice:
    usd_per_gpu_hour: float
    what: str
    source: str
    as_of: str


# A few public list prices, per GPU-hour, as quoted by their sources on the dates given. Prices
# move often and differ by region, commitment and provider: give --gpu-hour-price for your own.
GPU_PRICES: dict[str, GpuPrice] = {
    "h100-aws-p5": GpuPrice(
        98.32 / 8,
        "AWS p5.48xlarge (8x H100 SXM) on-demand, us-east-1, $98.32/h per instance",
        "https://www.nextplatform.com/2023/07/27/h100-gpu-instance-pricing-on-aws-grin-and-bear-it/",
        "2023-07",
    ),
    "h100-on-demand": GpuPrice(
        2.49,
        "H100 SXM on-demand at a specialty GPU cloud (Lambda), per GPU",
        "https://computespec.pages.dev/learn/pricing/cloud-gpu-pricing-explained",
        "undated page, read 2026",
    ),
    "h200-on-demand": GpuPrice(
        3.50,
        "H200 SXM on-demand, low end of the specialty-cloud range ($3.50-4.50)",
        "https://www.mercatus-ai.com/blog/cloud-gpu-pricing",
        "2026-05",
    ),
    "a100-80gb-on-demand": GpuPrice(
        1.10,
        "A100 80GB on-demand, low end of the specialty-cloud range ($1.10-1.50)",
        "https://www.mercatus-ai.com/blog/cloud-gpu-pricing",
        "2026-05",
    ),
}


@dataclass(frozen=True)
class Price:
    """What the deployment costs per hour."""

    usd_per_gpu_hour: float
    gpus: int
    source: str = "--gpu-hour-price"

    @property
    def usd_per_hour(self) -> float:
        return self.usd_per_gpu_hour * self.gpus

    def to_dict(self) -> dict[str, Any]:
        return {
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "gpus": self.gpus,
            "usd_per_hour": self.usd_per_hour,
            "source": self.source,
        }


def resolve_price(gpu_hour_price: float | None, gpus: int | None, gpu_price: str | None) -> Price | None:
    """--gpu-hour-price / --gpu-price NAME and --gpus -> Price (None when no price is given)."""
    if gpus is not None and gpus < 1:
        raise ConfigError("--gpus must be at least 1")
    if gpu_hour_price is not None and gpu_price is not None:
        raise ConfigError("give --gpu-hour-price or --gpu-price, not both")
    if gpu_hour_price is not None:
        if not gpu_hour_price > 0:
            raise ConfigError("--gpu-hour-price must be > 0 (US dollars per GPU-hour)")
        return Price(float(gpu_hour_price), gpus or 1)
    if gpu_price is not None:
        entry = GPU_PRICES.get(gpu_price.lower())
        if entry is None:
            raise ConfigError(
                f"--gpu-price {gpu_price}: unknown; known: {', '.join(GPU_PRICES)} (or give --gpu-hour-price DOLLARS)"
            )
        return Price(
            entry.usd_per_gpu_hour, gpus or 1, f"{gpu_price.lower()}: {entry.what} ({entry.source}, {entry.as_of})"
        )
    return None  # --gpus alone: throughput per GPU, no cost


def usd_per_million(usd_per_hour: float, tokens_per_s: float | None) -> float | None:
    """Dollars per 1M tokens at `tokens_per_s` (None when nothing was produced)."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return usd_per_hour / (tokens_per_s * 3600.0) * 1e6


def cost_block(throughput: Throughput | Mapping[str, float], price: Price) -> Cost:
    """The `cost` block of a summary from its `throughput` block (a rate it lacks costs nothing: null)."""
    hourly = price.usd_per_hour
    return {
        "usd_per_gpu_hour": price.usd_per_gpu_hour,
        "gpus": price.gpus,
        "usd_per_hour": price.usd_per_hour,
        "source": price.source,
        "usd_per_1m_input_tokens": usd_per_million(hourly, throughput.get("input_tokens_per_s")),
        "usd_per_1m_output_tokens": usd_per_million(hourly, throughput.get("output_tokens_per_s")),
        "usd_per_1m_total_tokens": usd_per_million(hourly, throughput.get("total_tokens_per_s")),
    }
