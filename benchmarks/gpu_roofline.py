"""What the local GPU really delivers to one catalogue model's matrix products, against the datasheet
figures `sim/catalog/gpus.py` holds (run by hand on a GPU machine; needs PyTorch with CUDA, not a dependency):

    PYTHONPATH=src python3 benchmarks/gpu_roofline.py --model Llama-3.1-8B --json roofline.json
    PYTHONPATH=src python3 benchmarks/gpu_roofline.py --model Llama-3.1-70B --tp 8 --fp8   # one GPU's share

It times, on random BF16 weights of the model's shapes (no download):
- a device-to-device copy (bytes read + written / time, against the datasheet HBM bandwidth);
- one decode step's linear layers (every layer's QKV, O, gate/up and down projections and the LM head,
  replayed from one CUDA graph so launches do not count) at batch 1 .. 512: weight bytes / time is the
  HBM efficiency a step's weight stream reaches, 2 x batch x parameters / time the tensor-core one;
- the same linear layers over a prefill chunk of 8,192 tokens (compute-bound);
- with `--fp8`, all of it with FP8 (E4M3) weights and activations (torch._scaled_mm), against twice the BF16 peak.

`docs/plan.md` compares these with the fitted memory and compute efficiency knobs: an efficiency above
what the GPU delivers to the matrix products alone means the knob absorbs some other cost.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servescope.sim.catalog.gpus import GPUS, get_gpu
from servescope.sim.catalog.models import get_model


def _linear_shapes(name: str, tp: int = 1) -> list[tuple[int, int]]:
    """(in, out) of every linear layer of one dense decoder pass on one GPU of a TP group, LM head
    included (column-parallel QKV, gate/up and head split their outputs, row-parallel O and down their
    inputs)."""
    m = get_model(name)
    if m.n_routed_experts or m.attention != "gqa":
        raise SystemExit(f"{name}: only dense GQA models (the decode GEMMs of an MoE depend on routing)")
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    layer = [
        (m.hidden, (q + 2 * kv) // tp),
        (q // tp, m.hidden),
        (m.hidden, 2 * m.intermediate // tp),
        (m.intermediate // tp, m.hidden),
    ]
    return layer * m.layers + [(m.hidden, m.vocab // tp)]


def _timed(torch: Any, fn: Callable[[], object], reps: int) -> float:
    """Seconds per call by CUDA events, after three warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def _copy(torch: Any, dev: Any, hbm: float, reps: int) -> dict[str, float]:
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    t = _timed(torch, lambda: b.copy_(a), reps)
    return {"bytes": 2 * n, "s": t, "hbm_eff": 2 * n / t / hbm}


def _linear_pass(
    torch: Any, dev: Any, weights: list[Any], shapes: list[tuple[int, int]], tokens: int, reps: int, fp8: bool
) -> float:
    """Seconds for every linear layer over `tokens` rows, replayed from one CUDA graph. FP8: E4M3
    weights and activations through torch._scaled_mm (per-tensor scales, BF16 out), as FP8 checkpoints run."""
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    xs = {k: torch.randn(tokens, k, device=dev, dtype=torch.bfloat16).to(dtype) for k in {s[0] for s in shapes}}
    outs = {s: torch.empty(tokens, s[1], device=dev, dtype=torch.bfloat16) for s in set(shapes)}  # reused
    one = torch.tensor(1.0, device=dev)

    def step() -> None:
        for w, s in zip(weights, shapes):
            if fp8:
                outs[s] = torch._scaled_mm(xs[s[0]], w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            else:
                torch.matmul(xs[s[0]], w.t(), out=outs[s])

    step()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    t = _timed(torch, g.replay, reps)
    torch.cuda.empty_cache()
    return t


def main(argv: list[str] | None = None) -> int:
    import torch  # the GPU machine's; servescope does not depend on it

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="Llama-3.1-8B")
    ap.add_argument(
        "--gpu", default=None, help="catalogue GPU whose datasheet figures to compare with [from the device's name]"
    )
    ap.add_argument("--tp", type=int, default=1, help="the shapes one GPU of a TP group multiplies [1]")
    ap.add_argument("--batches", default="1,8,32,64,128,256,512")
    ap.add_argument("--prefill-tokens", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--fp8", action="store_true", help="FP8 (E4M3) weights and activations, against the FP8 peak")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0)
    squeezed = name.lower().replace(" ", "")
    gpu = args.gpu or next((g for g in GPUS if g in squeezed), None)
    if gpu is None:
        print(f"{name}: not a catalogue GPU; name one with --gpu", file=sys.stderr)
        return 2
    spec = get_gpu(gpu)
    dev = torch.device("cuda")
    shapes = _linear_shapes(args.model, args.tp)
    # every layer its own weights (one tensor per shape would be served from L2 for the small ones)
    dtype = torch.float8_e4m3fn if args.fp8 else torch.bfloat16
    per_layer = [torch.randn(s[1], s[0], device=dev, dtype=torch.bfloat16).to(dtype) for s in shapes]
    peak = spec.bf16_flops * (2 if args.fp8 else 1)  # Hopper's dense FP8 peak is twice its BF16
    weight_bytes = sum(w.numel() * w.element_size() for w in per_layer)
    params = sum(w.numel() for w in per_layer)

    out: dict[str, object] = {
        "model": args.model,
        "tp": args.tp,
        "gpu_datasheet": gpu,
        "device": name,
        "torch": torch.__version__,
        "weight_bytes": weight_bytes,
        "params": params,
        "hbm_bytes_per_s": spec.hbm_bytes_per_s,
        "peak_flops": peak,
        "fp8": args.fp8,
    }
    copy = _copy(torch, dev, spec.hbm_bytes_per_s, args.reps)
    out["copy"] = copy
    rows = []
    for batch in [int(x) for x in args.batches.split(",")] + [args.prefill_tokens]:
        try:
            t = _linear_pass(torch, dev, per_layer, shapes, batch, args.reps, args.fp8)
        except RuntimeError as exc:  # e.g. a shape _scaled_mm refuses
            print(f"tokens {batch:5d}: {str(exc).splitlines()[0]}", flush=True)
            continue
        row = {
            "tokens": batch,
            "s": t,
            "hbm_eff": weight_bytes / t / spec.hbm_bytes_per_s,
            "tc_eff": 2.0 * batch * params / t / peak,
            "prefill": batch == args.prefill_tokens,
        }
        rows.append(row)
        print(
            f"tokens {batch:5d}: {t * 1e3:8.3f} ms  weight stream {row['hbm_eff']:6.1%} of HBM  "
            f"tensor cores {row['tc_eff']:6.1%} of {'FP8' if args.fp8 else 'BF16'} peak",
            flush=True,
        )
    out["steps"] = rows
    print(
        f"copy: {copy['hbm_eff']:.1%} of {spec.hbm_bytes_per_s / 1e12:.2f} TB/s "
        f"({gpu} datasheet); {args.model} TP{args.tp}: {weight_bytes / 2**30:.1f} GiB of linear weights"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
