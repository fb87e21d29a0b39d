"""A continuous-batching serving engine on any clock. Pure: no I/O, no wall clock.

The emulator (`servescope.emulator.pacing`) drives it on the wall clock; `servescope plan` drives it on a
virtual clock through `sim.simulate`. It models what vLLM's V1 scheduler does, at token granularity:

- a FCFS waiting queue and a running batch of at most `max_num_seqs` sequences;
- a KV cache of `kv_blocks` blocks of `block_size` tokens (each running sequence also holds
  `seq_overhead_blocks` more: vLLM's sliding-window pages);
- each step, running sequences first (one decode token each, or their next prefill chunk), then
  waiting ones, under a budget of `max_num_batched_tokens` tokens (chunked prefill), the prompt
  tokens among them at most `max_prefill_tokens` when set; with `chunked_prefill=False` a prompt is
  prefilled whole in one step;
- prefix caching: a prompt's full blocks are named by a hash chain over their token ids; a new
  request reuses the longest cached prefix (at least one token is always recomputed); blocks whose
  last user left stay cached and are evicted least-recently-freed first when blocks run out;
- admission with a reserve (`reserve_output` > 0, TensorRT-LLM's GUARANTEED_NO_EVICT capacity
  scheduler, SGLang's new_token_ratio): a waiting request starts only when the blocks of its prompt
  and that share of its remaining output fit beside what the running requests set aside for theirs,
  so the batch holds KV tokens / (prompt + reserve) requests and a full reserve never preempts;
- preemption by recompute: when a running sequence needs a block and none is free, the most recently
  admitted running sequence is preempted (its blocks freed, back to the front of the queue, its
  tokens kept); it is re-prefilled later (prompt + generated tokens) and continues. No request is lost.
  With prefix caching on, its computed prompt blocks stay cached when freed, and its re-admission finds
  those not evicted since, as vLLM V1's does (`_preempt_request` sets num_computed_tokens to 0 and
  frees the blocks into the cache; re-admission calls `get_computed_blocks`) and SGLang's (a retracted
  request's prompt stays in the radix tree). A prompt known by its length only gets block names of its
  own for this, shared with no other request;
- the step that completes a prefill emits the sequence's next token (its first, for a new request);
  every later step emits one token per decoding sequence;
- a step's duration comes from `steptime.step_time_s` (roofline + overheads). An engine that does not
  mix prompts and decodes (`mixed_steps=False`: vLLM V0 without chunked prefill, TGI) runs a prompt
  step and then the decodes' step; the sim keeps them one step of the two's summed duration, whose
  end brings both the first tokens and the decodes' tokens.

API::

    engine = Engine(config)                      # EngineConfig, usually from sim.profile
    engine.add(SimRequest(id, prompt_len, max_tokens, prompt_token_ids=...))
    result = engine.step(now_s)                  # StepResult, or None when there is nothing to run
    engine.abort(request)                        # client went away
    engine.stats                                 # EngineStats: gauges and counters (vLLM's metrics)

`sim.simulate.simulate(config, requests, concurrency=None)` runs a whole workload on a virtual clock.
`EngineConfig` is in `sim.config`; `SimRequest` (the per-sequence state) in `sim.request`; the batch's
state and how a sequence enters and leaves it (admission, blocks, preemption, finish) in `sim.batch`.

`max_tokens` is the exact number of tokens the request will generate (the caller decides EOS).
Decoding sequences are advanced lazily (O(1) per step, not O(batch): block needs are counted per
phase of the block boundary, context sums kept as aggregates, finishes in a heap), and
`decode_run` runs stretches of decode-only steps in one call, so `simulate` runs 10,000
DeepSeek-R1 requests in about a second. `step(with_tokens=True)` lists the requests that got a
token, which costs O(batch) and is what the emulator uses.

Simplifications: generated tokens are not entered in the prefix cache (prompts are); all
sequences share one FCFS priority; a step's tokens are all emitted at its end.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from servescope.sim.batch import RunningBatch
from servescope.sim.request import DECODE, DONE, PREFILL, SAMPLED, WAITING, SimRequest, block_hashes
from servescope.sim.steptime import StepShape, decode_terms, step_time_s

__all__ = ["StepResult", "EngineStats", "Engine"]


@dataclass(slots=True)
class StepResult:
    """One executed step. Tokens are emitted at the step's end (`start_s + duration_s`)."""

    index: int
    start_s: float
    duration_s: float
    decode_seqs: int
    prefill_tokens: int
    tokens: list[SimRequest] | None  # requests that got one token (only with with_tokens=True)
    first_token: list[SimRequest]  # requests whose first token this is
    finished: list[SimRequest]
    preempted: list[SimRequest]

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(slots=True)
class EngineStats:
    """Gauges and counters, named after vLLM's /metrics."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    prefix_queries: int = 0  # tokens looked up
    prefix_hits: int = 0  # tokens found
    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    steps: int = 0


class Engine(RunningBatch):
    """Continuous batching with paged KV, chunked prefill, prefix caching and preemption."""

    def add(self, req: SimRequest) -> None:
        """Queue a request. Raises ValueError if it can never fit (length or KV capacity)."""
        cfg = self.config
        total = req.prompt_len + req.max_tokens
        if req.prompt_len < 1 or req.max_tokens < 1:
            raise ValueError("prompt_len and max_tokens must be >= 1")
        if total > cfg.max_model_len:
            raise ValueError(f"prompt_len + max_tokens = {total} > max_model_len {cfg.max_model_len}")
        if -(-total // self._bs) + self._extra > cfg.kv_blocks:
            raise ValueError(f"request needs {total} tokens of KV; the cache holds {cfg.kv_tokens}")
        if req.prefix_hashes is None and self._prefix:
            if req.prompt_token_ids is not None:
                req.prefix_hashes = block_hashes(req.prompt_token_ids, self._bs)
            else:  # known by its length only: names no other prompt shares, found again after a preemption
                n = req.prompt_len // self._bs
                req.prefix_hashes = range(self._own, self._own + n)
                self._own += n
        req.state = WAITING
        self._waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """Drop a request wherever it is (client disconnected); its blocks are freed."""
        if req.state == DONE:
            return
        if req.state == WAITING:
            try:
                self._waiting.remove(req)
            except ValueError:
                pass
        else:
            self._release(req, self._s - 1)
            self._running.remove(req)
        req.state = DONE
        req.gen += 1

    def has_work(self) -> bool:
        return bool(self._running or self._waiting)

    def emitted(self, req: SimRequest) -> int:
        """Tokens emitted so far by `req` (after the last executed step)."""
        if req.state == DECODE:
            return req.out + (self._s - 1 - req.q)
        return req.out

    @property
    def stats(self) -> EngineStats:
        used = self.pool.used
        return EngineStats(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_usage=used / self.config.kv_blocks,
            prefix_queries=self._prefix_queries,
            prefix_hits=self._prefix_hits,
            preemptions=self._preemptions,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._gen_tokens,
            finished=self._finished,
            steps=self._s,
        )

    def step(self, now_s: float, *, with_tokens: bool = True) -> StepResult | None:
        """Schedule and execute one step starting at `now_s`; None when idle."""
        if not self._running and not self._waiting:
            return None
        cfg = self.config
        s = self._s
        bs = self._bs
        preempted: list[SimRequest] = []
        # 1. decoding sequences: one token each; blocks for those crossing a block boundary.
        key = (-s) % bs
        need = self._phase[key]
        while need > self.pool.available() and self._running:
            victim = self._running[-1]
            if victim.state == DECODE and victim.pos0 % bs == key:
                need -= 1
            self._preempt(victim, s - 1)
            preempted.append(victim)
        if need:
            self.pool.alloc(need)
        n_dec = len(self._decoding)
        budget = cfg.max_num_batched_tokens - n_dec
        if cfg.max_prefill_tokens and budget > cfg.max_prefill_tokens:
            budget = cfg.max_prefill_tokens  # the prompt tokens' own cap (SGLang DP attention's chunk)
        shape = StepShape(decode_seqs=n_dec, decode_ctx_tokens=self._sum_pos0 + n_dec * s)
        chunks: list[tuple[SimRequest, int]] = []
        admitted = 0  # of chunks, the first ones of requests admitted from the queue by this step
        # 2. running sequences still in prefill (only prefilling ones are preempted here).
        for req in list(self._prefilling):
            if budget <= 0:
                break
            if req.state != PREFILL:
                continue  # preempted earlier in this loop
            chunk = self._chunk(req, budget)
            if chunk <= 0:
                break
            while True:
                fit = (req.blocks - self._extra + self.pool.available()) * bs - req.computed
                if fit >= chunk:
                    break
                if fit > 0 and cfg.chunked_prefill:
                    chunk = fit
                    break
                victim = self._prefilling[-1]
                self._preempt(victim, s - 1)
                preempted.append(victim)
                if victim is req:
                    chunk = 0
                    break
            if chunk <= 0:
                continue
            self._grow(req, req.computed + chunk)
            chunks.append((req, chunk))
            budget -= chunk
        # 3. waiting requests, FCFS, while there is room (none after a preemption, as vLLM).
        waiting = self._waiting
        while waiting and budget > 0 and not preempted and len(self._running) < cfg.max_num_seqs:
            req = waiting[0]
            chunk = self._admit(req, budget)
            if chunk <= 0:
                break
            waiting.popleft()
            if req.first_scheduled_s < 0:
                req.first_scheduled_s = now_s
                admitted += 1
            chunks.append((req, chunk))
            budget -= chunk
        if n_dec == 0 and not chunks:
            if preempted:  # everything was preempted; nothing ran (cannot normally happen)
                self._s += 1
                return StepResult(s, now_s, 0.0, 0, 0, [] if with_tokens else None, [], [], preempted)
            return None
        # 4. cost of the step.
        shape.admitted_seqs = admitted
        for req, chunk in chunks:
            shape.prefill_seqs += 1
            shape.prefill_tokens += chunk
            shape.prefill_ctx_pairs += chunk * (req.computed + chunk / 2)
            shape.prefill_ctx_reads += req.computed
        if cfg.mixed_steps or not (n_dec and chunks):
            duration = step_time_s(cfg.cost, shape)
        else:  # a prompt step, then the decodes' own step: their token comes after both
            prompts = replace(shape, decode_seqs=0, decode_ctx_tokens=0)
            decodes = StepShape(decode_seqs=n_dec, decode_ctx_tokens=shape.decode_ctx_tokens)
            duration = step_time_s(cfg.cost, prompts) + step_time_s(cfg.cost, decodes)
        # 5. apply: decode tokens, finished decodes, prefill progress.
        tokens = list(self._decoding.values()) if with_tokens else None
        self._gen_tokens += n_dec
        finished: list[SimRequest] = []
        heap = self._finish_heap
        while heap and heap[0][0] <= s:
            _, _, gen, req = heapq.heappop(heap)
            if gen != req.gen or req.state != DECODE:
                continue
            self._finish(req, s)
            finished.append(req)
        first: list[SimRequest] = []
        for req, chunk in chunks:
            req.computed += chunk
            if self._prefix and req.prefix_hashes and not isinstance(req.prefix_hashes, range):
                self._register_blocks(req)  # (names of its own are entered when it is preempted)
            if req.computed < req.target:
                continue
            # prefill complete: this step samples the next token
            self._prefilling.remove(req)
            req.state = SAMPLED
            if tokens is not None:
                tokens.append(req)
            self._gen_tokens += 1
            if req.out == 0:
                req.first_token_step = s
                self._prompt_tokens += req.prompt_len
                first.append(req)
            req.out += 1
            req.segments.append((s, s))
            if req.out >= req.max_tokens:
                self._finish(req, s)
                finished.append(req)
            else:
                self._start_decode(req, s)
        self._s = s + 1
        return StepResult(s, now_s, duration, n_dec, shape.prefill_tokens, tokens, first, finished, preempted)

    def decode_run(self, now_s: float, until_s: float, max_steps: int) -> list[float]:
        """Fast path for virtual clocks: run consecutive decode-only steps in one call.

        Runs only while nothing but decoding can happen: no request in prefill or admissible from
        the queue (it is empty, or its head cannot start before a running request leaves), no
        request finishing, blocks available, and each step starting before `until_s` (the next
        arrival). Returns the durations of the steps run (maybe none); equivalent to calling
        `step(with_tokens=False)` that many times.
        """
        if (self._waiting and not self._queue_blocked()) or self._prefilling or not self._decoding:
            return []
        heap = self._finish_heap
        while heap and (heap[0][2] != heap[0][3].gen or heap[0][3].state != DECODE):
            heapq.heappop(heap)
        s0 = self._s
        k_max = min(max_steps, (heap[0][0] - s0) if heap else max_steps)
        bs = self._bs
        phase = self._phase
        avail = self.pool.available()
        n = len(self._decoding)
        # the batch is fixed for the run, so each step's time is `step_time_s` with only the context
        # changing: its other terms are priced once (`DecodeTerms`, the same result bit for bit), and
        # `DecodeTerms.time_s` is written out in the loop below, the simulation's hottest
        terms = self._decode_terms.get(n)
        if terms is None:
            terms = self._decode_terms[n] = decode_terms(self.config.cost, n)
        w, kv, mem_bw = terms.weight_bytes, terms.kv_bytes_per_token, terms.mem_bytes_per_s
        tf, af = terms.token_flops, terms.attn_flops_per_token_ctx
        flops, aflops = terms.flops_per_s, terms.attn_flops_per_s
        a0, a1, a2, a3, a4, a5, a6, a7 = terms.after
        base_ctx = self._sum_pos0
        durations: list[float] = []
        need_total = 0
        t = now_s
        for j in range(k_max):
            if t >= until_s:
                break
            s = s0 + j
            need = phase[(-s) % bs]
            if need_total + need > avail:
                break
            need_total += need
            ctx = base_ctx + n * s
            mem_s = (w + kv * ctx) / mem_bw
            compute_s = tf / flops + af * ctx / aflops
            d = (mem_s if mem_s > compute_s else compute_s) + a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
            durations.append(d)
            t += d
        k = len(durations)
        if k:
            self.pool.alloc(need_total)
            self._gen_tokens += n * k
            self._s = s0 + k
        return durations
