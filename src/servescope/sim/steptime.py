"""Step time of one engine iteration: a roofline plus fixed overheads. Pure, no I/O.

One step runs the whole model once over a batch of `decode_seqs` decode tokens (one per running
sequence) and `prefill_tokens` prompt tokens (chunked prefill). Its duration, per GPU of the
deployment (all ranks run in lock step)::

    bytes  = dense_weight_bytes                               # attention, dense MLPs, shared experts
           + routed_expert_bytes * distinct_experts(tokens)   # MoE: only the experts the batch hits
           + kv_bytes_per_token * (decode_ctx_tokens + prefill_ctx_reads)
    linear_flops = flops_per_token * tokens
    attn_flops   = attn_flops_per_token_ctx * decode_ctx_tokens + prefill_attn_flops_per_pair * prefill_ctx_pairs
    t      = max(bytes / (hbm_bytes_per_s * mem_efficiency),
                 (linear_flops / flops_per_s + attn_flops / attn_flops_per_s) / compute_efficiency)
           + step_overhead_s + layers * layer_overhead_s + seq_overhead_s * sequences
           + token_overhead_s * tokens + prefill_seq_overhead_s * prefill_seqs
           + admit_overhead_s * admitted_seqs             # prompts this step schedules for the first time
           + layers * prefill_layer_overhead_s        # only a step that computes prompt tokens

`admit_overhead_s` is what the engine's loop loses for each request it admits (a step that schedules a
prompt's first chunk), once per request however many chunks its prompt takes: measured on a real
engine by `sim.replay` (vLLM's CPU build loses about a c=1 request's front-end time per admission;
docs/plan.md, the real scheduler), 0 in the GPU profiles.

`prefill_layer_overhead_s` is what a step with prompt tokens pays per layer on top of a decode step's
`layer_overhead_s`: decode batches replay captured CUDA graphs, prompt batches mostly do not. A
decode-only step of more sequences than the largest captured batch (`graph_max_seqs`: SGLang's
`--cuda-graph-max-bs`, 160 by default before 0.5.3; vLLM V1's largest capture size, 512) runs eager
too and pays the same per-layer cost. SGLang
captures decode batch sizes (`--cuda-graph-max-bs`) and runs extend batches eagerly; vLLM V1 replays
piecewise graphs (attention eager) only for steps up to its largest capture size, 512 tokens by
default; TensorRT-LLM's default graphs cover generation-only batches, and its piecewise graphs exist
"to reduce context-phase launch overhead" (its Torch Compile & Piecewise CUDA Graph guide). So a
prompt step launches each layer's kernels (and, under TP, its all-reduces) from the host. The cost
is the host's: it scales with the layer count and the kernels per layer (an MLA + MoE layer launches
several times a dense GQA layer's), not with tokens. Published first tokens of short prompts on
SGLang show it: ~30 ms for the 36-layer Qwen3-8B on one H100 (GPUStack), ~90 ms for the 94-layer
Qwen3-235B and ~140 ms for the 61-layer DeepSeek-R1 on 8 B200s (the SGLang cookbook), each at
prompt compute of a few ms.

Communication (tensor parallelism, expert parallelism), added after the roofline (not overlapped)::

    comm_s = tokens * comm_bytes_per_token / comm_bytes_per_s + collectives * collective_s

A collective that spans nodes (tensor parallelism wider than one node) pays `internode_collective_s`
instead: NCCL's small all-reduce across InfiniBand takes ~20-26 us (nccl-tests issue 150: 19-20 us
for 8 bytes between two A100 nodes on HDR; NCCL issue 1453: NCCL's own estimate of 25.9 us for a
4 KB all-reduce on an H100 cluster) where within a node the engines' custom all-reduce kernels
take a few microseconds.

`comm_bytes_per_token` is what one GPU sends per token per step: a ring all-reduce of an M-byte
message moves 2 (n - 1) / n * M bytes per rank (Patarasuk & Yuan 2009; NCCL's "bus bandwidth"
definition in nccl-tests PERFORMANCE.md), two all-reduces of `hidden` BF16 values per layer under
Megatron-style TP (Shoeybi et al. 2019, section 3); an EP all-to-all dispatch + combine moves
(n - 1) / n of each token's top-k hidden vectors (FP8 dispatch, BF16 combine in DeepEP). `collectives`
is the number of collective calls per step, each costing a fixed latency `collective_s`.

With attention data parallel and expert parallel (SGLang DP-attention, TRT-LLM ADP), the experts on a
GPU see the tokens of every DP rank: `moe_token_multiplier` = dp. Speculative decoding (MTP) verifies
`decode_tokens_per_seq` tokens per decoding sequence per step (1 + draft length): FLOPs and experts
grow with it, weight bytes do not.

Prefill/decode disaggregation: a decode worker receives each prompt's KV from a prefill worker (SGLang
PD, NIXL/Mooncake transfer) and computes none of it: `prefill_work` = 0 drops the prompt tokens'
FLOPs, bytes and communication from its steps (the admission still costs its per-sequence overhead).

`distinct_experts(T) = n_experts * (1 - (1 - experts_per_token / n_experts) ** T)` is the expected
number of routed experts (per MoE layer) that T tokens hit when each picks `experts_per_token` of
`n_experts` uniformly: 1 decode token reads 8 of 256 DeepSeek experts, 100 tokens read ~245. Hence
"small-batch MoE decode is dominated by fixed overhead": the bytes are few and the per-layer kernel
launches and all-reduces are not. `routed_expert_bytes` is one expert's bytes summed over all MoE
layers, on one GPU (its TP shard or, with expert parallelism, its share).

Units: bytes, FLOPs, seconds; all figures per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StepCost", "StepShape", "step_time_s", "distinct_experts", "DecodeTerms", "decode_terms"]


@dataclass(frozen=True, slots=True)
class StepCost:
    """Per-GPU cost coefficients of one deployment (model x GPU x parallelism x engine)."""

    dense_weight_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float  # 2 x active parameters on this GPU (linear layers)
    hbm_bytes_per_s: float
    flops_per_s: float  # dense peak at the compute dtype
    attn_flops_per_s: float = 0.0  # attention's peak, at the KV cache's dtype (0: flops_per_s)
    attn_flops_per_token_ctx: float = 0.0  # per query token per context token (QK^T and PV)
    # the same for a prompt token's context pairs (0: attn_flops_per_token_ctx); MLA computes prompts in
    # its MHA form and decode in its absorbed form (sim.profile.step_cost)
    prefill_attn_flops_per_pair: float = 0.0
    routed_expert_bytes: float = 0.0  # one routed expert, all MoE layers, on this GPU
    n_experts: int = 0
    experts_per_token: int = 0
    layers: int = 1
    mem_efficiency: float = 0.8
    compute_efficiency: float = 0.5
    step_overhead_s: float = 0.0
    layer_overhead_s: float = 0.0
    seq_overhead_s: float = 0.0
    token_overhead_s: float = 0.0
    prefill_layer_overhead_s: float = 0.0  # per layer, on a step that computes prompt tokens
    prefill_seq_overhead_s: float = 0.0  # per prompt chunk a step computes, on top of seq_overhead_s
    admit_overhead_s: float = 0.0  # per request whose first prompt chunk the step computes
    comm_bytes_per_token: float = 0.0  # bytes this GPU sends per token per step (all collectives)
    comm_bytes_per_s: float = 0.0  # achieved collective bandwidth per GPU (0: no communication)
    comm_prefill_bytes_per_s: float = 0.0  # the same for prompt tokens' large messages (0: comm_bytes_per_s)
    collectives: int = 0  # collective calls per step
    collective_s: float = 0.0  # fixed latency of one collective call
    internode_collectives: int = 0  # of `collectives`, the calls that span nodes (TP wider than a node)
    internode_collective_s: float = 0.0  # their latency (0: collective_s)
    moe_token_multiplier: float = 1.0  # EP across DP-attention ranks: expert-side tokens per local token
    decode_tokens_per_seq: float = 1.0  # speculative decoding: tokens verified per decoding sequence
    prefill_work: float = 1.0  # share of the prompt's compute done here (0: a PD decode worker)
    graph_max_seqs: int = 0  # largest decode batch a captured CUDA graph replays (0: every batch)
    # MLA: a prompt step whose requests' cached prefixes sum to lo <= n < hi computes its attention in the
    # absorbed form, at attn_flops_per_token_ctx a pair (sim.defaults.mla_absorbed_prefix; None: never)
    absorbed_prefix: tuple[int, int] | None = None


@dataclass(slots=True)
class StepShape:
    """What one step computes."""

    decode_seqs: int = 0
    decode_ctx_tokens: int = 0  # sum over decode sequences of their context length
    prefill_seqs: int = 0
    prefill_tokens: int = 0
    prefill_ctx_pairs: float = 0.0  # sum over prefill chunks of chunk x (cached + chunk / 2)
    prefill_ctx_reads: int = 0  # sum over prefill chunks of the cached context they read
    admitted_seqs: int = 0  # of prefill_seqs, the chunks that are their request's first (admissions)


def distinct_experts(cost: StepCost, tokens: int) -> float:
    """Expected routed experts hit per MoE layer by `tokens` tokens (0 for a dense model)."""
    n = cost.n_experts
    if n <= 0 or tokens <= 0:
        return 0.0
    return n * (1.0 - (1.0 - cost.experts_per_token / n) ** tokens)


def step_time_s(cost: StepCost, shape: StepShape) -> float:
    """Duration of one step in seconds (see the module docstring for the formula)."""
    if shape.decode_seqs + shape.prefill_tokens <= 0:
        return 0.0
    pw = cost.prefill_work
    tokens = shape.decode_seqs * cost.decode_tokens_per_seq + shape.prefill_tokens * pw
    weight_bytes = cost.dense_weight_bytes
    if cost.n_experts > 0:
        weight_bytes += cost.routed_expert_bytes * distinct_experts(cost, round(tokens * cost.moe_token_multiplier))
    kv_bytes = cost.kv_bytes_per_token * (shape.decode_ctx_tokens + shape.prefill_ctx_reads * pw)
    mem_s = (weight_bytes + kv_bytes) / (cost.hbm_bytes_per_s * cost.mem_efficiency)
    pair = cost.prefill_attn_flops_per_pair or cost.attn_flops_per_token_ctx
    if cost.absorbed_prefix is not None and shape.prefill_tokens:
        lo, hi = cost.absorbed_prefix
        if lo <= shape.prefill_ctx_reads < hi:
            pair = cost.attn_flops_per_token_ctx
    attn = cost.attn_flops_per_token_ctx * shape.decode_ctx_tokens + pair * shape.prefill_ctx_pairs * pw
    compute_s = cost.flops_per_token * tokens / (cost.flops_per_s * cost.compute_efficiency) + attn / (
        (cost.attn_flops_per_s or cost.flops_per_s) * cost.compute_efficiency
    )
    seqs = shape.decode_seqs + shape.prefill_seqs
    comm_s = 0.0
    if cost.comm_bytes_per_s > 0:
        dec = shape.decode_seqs * cost.decode_tokens_per_seq
        prefill_bw = cost.comm_prefill_bytes_per_s or cost.comm_bytes_per_s
        comm_s = cost.comm_bytes_per_token * (dec / cost.comm_bytes_per_s + (tokens - dec) / prefill_bw)
    return (
        (mem_s if mem_s > compute_s else compute_s)
        + comm_s
        + (cost.collectives - cost.internode_collectives) * cost.collective_s
        + cost.internode_collectives * (cost.internode_collective_s or cost.collective_s)
        + cost.step_overhead_s
        + cost.layers * cost.layer_overhead_s
        + cost.seq_overhead_s * seqs
        + cost.token_overhead_s * tokens
        + cost.prefill_seq_overhead_s * shape.prefill_seqs
        + cost.admit_overhead_s * shape.admitted_seqs
        + (
            cost.layers * cost.prefill_layer_overhead_s
            if (shape.prefill_tokens and pw) or 0 < cost.graph_max_seqs < shape.decode_seqs
            else 0.0
        )
    )


@dataclass(frozen=True, slots=True)
class DecodeTerms:
    """The parts of `step_time_s` for a decode-only step of a fixed batch that do not depend on its
    context, so that a run of such steps (`Engine.decode_run`, whose context grows by the batch size
    each step) prices each step with a few float operations instead of a call:
    ``time_s(ctx) == step_time_s(cost, StepShape(decode_seqs=n, decode_ctx_tokens=ctx))``, bit for bit
    (the same operations in the same order; tests/unit/test_steptime.py checks it)."""

    weight_bytes: float
    kv_bytes_per_token: float
    mem_bytes_per_s: float
    token_flops: float
    attn_flops_per_token_ctx: float
    flops_per_s: float
    attn_flops_per_s: float
    after: tuple[float, ...]  # comm, collectives, step, layers, sequences, tokens, eager: in this order

    def time_s(self, ctx: int) -> float:
        mem_s = (self.weight_bytes + self.kv_bytes_per_token * ctx) / self.mem_bytes_per_s
        compute_s = self.token_flops / self.flops_per_s + self.attn_flops_per_token_ctx * ctx / self.attn_flops_per_s
        t = mem_s if mem_s > compute_s else compute_s
        for x in self.after:
            t += x
        return t


def decode_terms(cost: StepCost, seqs: int) -> DecodeTerms:
    """`DecodeTerms` of a decode-only step of `seqs` sequences (> 0)."""
    # each term as `step_time_s` computes it for that shape (no prompt tokens), so the floats are the same
    tokens = seqs * cost.decode_tokens_per_seq + 0 * cost.prefill_work
    weight_bytes = cost.dense_weight_bytes
    if cost.n_experts > 0:
        weight_bytes += cost.routed_expert_bytes * distinct_experts(cost, round(tokens * cost.moe_token_multiplier))
    comm_s = 0.0
    if cost.comm_bytes_per_s > 0:
        dec = seqs * cost.decode_tokens_per_seq
        prefill_bw = cost.comm_prefill_bytes_per_s or cost.comm_bytes_per_s
        comm_s = cost.comm_bytes_per_token * (dec / cost.comm_bytes_per_s + (tokens - dec) / prefill_bw)
    after = (
        comm_s,
        (cost.collectives - cost.internode_collectives) * cost.collective_s,
        cost.internode_collectives * (cost.internode_collective_s or cost.collective_s),
        cost.step_overhead_s,
        cost.layers * cost.layer_overhead_s,
        cost.seq_overhead_s * seqs,
        cost.token_overhead_s * tokens,
        cost.layers * cost.prefill_layer_overhead_s if 0 < cost.graph_max_seqs < seqs else 0.0,
    )
    return DecodeTerms(
        weight_bytes,
        cost.kv_bytes_per_token,
        cost.hbm_bytes_per_s * cost.mem_efficiency,
        cost.flops_per_token * tokens,
        cost.attn_flops_per_token_ctx,
        cost.flops_per_s * cost.compute_efficiency,
        (cost.attn_flops_per_s or cost.flops_per_s) * cost.compute_efficiency,
        after,
    )
