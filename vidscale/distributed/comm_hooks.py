"""Gradient communication options for DDP: fp16 / bf16 compression and PowerSGD.

The TSM paper's third guideline (§3c, network efficiency) is to send fewer bytes per step. These
hooks attach to DDP at one point (`attach_comm_hook`) and count the bytes each rank puts into the
all-reduce, so the saving is measured, not assumed.

- fp16/bf16: each gradient bucket is cast down, all-reduced, averaged and cast back. The built-in
  bf16 hook refuses non-NCCL builds; this one works on gloo too (gloo all-reduces bfloat16).
- PowerSGD (Vogels et al., 2019): rank-r low-rank approximation with error feedback, through
  torch's `powerSGD_hook` (the non-batched variant: the batched one is broken in torch 2.13).
  Its state (per-rank error residuals, warm-start factors, step counter) is checkpointed through
  the handle that `attach_comm_hook` returns, per parameter (`PowerSGDHook`), so that a resumed
  run is exact.

`CommHook.take()` reports, besides bytes, the seconds during which at least one of this rank's
gradient all-reduces was in flight, the part of them that the step waited for (exposed: not
hidden behind the backward pass) and the number of synchronised steps (`TrafficMeter`). Every
hook is timed, DDP's plain all-reduce (`comm.hook=none`) included: it runs as a Python hook
that reproduces DDP's native averaging bit for bit (`_mean_allreduce_hook`).
"""

# No `from __future__ import annotations`: DDP inspects hook annotations at registration.

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel

from vidscale.distributed.traffic import Traffic

HookName = Literal["none", "fp16", "bf16", "powersgd"]


@dataclass
class CommConfig:
    """How gradients cross the network (`--set comm.hook=bf16`)."""

    hook: HookName = "none"
    bucket_cap_mb: float = 25.0
    powersgd_rank: int = 2
    powersgd_start_step: int = 10  # plain all-reduce for the first steps (PowerSGD paper §4)

    def validate(self) -> None:
        if self.bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {self.bucket_cap_mb}")
        if self.powersgd_rank < 1:
            raise ValueError(f"powersgd_rank must be >= 1, got {self.powersgd_rank}")
        if self.powersgd_start_step < 2:
            # torch requires at least 2 warm-up iterations to build its buckets.
            raise ValueError(f"powersgd_start_step must be >= 2, got {self.powersgd_start_step}")


# When something happened: perf_counter seconds on the host, or an event on a CUDA stream.
Mark = float | torch.cuda.Event


def mark(device: torch.device) -> Mark:
    """Now, as seen by the work queued on `device`.

    On CUDA a collective's future completes when the collective is queued, not when it ends
    (NCCL marks it done at launch), so the host clock would time the launch only. A timing
    event recorded in the future's callback runs on a stream that waits for the collective.
    (This CUDA path has not yet run on a GPU: the tests run gloo on the CPU.)
    """
    if device.type != "cuda":
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def seconds_between(ref: Mark, later: Mark) -> float:
    """`later` - `ref` in seconds (negative when `later` came first); waits for CUDA events."""
    if isinstance(ref, float) and isinstance(later, float):
        return later - ref
    assert isinstance(ref, torch.cuda.Event) and isinstance(later, torch.cuda.Event)
    ref.synchronize()
    later.synchronize()
    return float(ref.elapsed_time(later)) / 1000.0


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of the intervals `spans` (overlapping intervals count once)."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@dataclass(frozen=True)
class BucketTimes:
    """One gradient bucket's hook on one clock (seconds): `called` when DDP handed it the
    bucket (its gradients are ready), `returned` when the training thread went on, `completed`
    when its all-reduce ended; `last`: DDP's last bucket of the backward pass."""

    called: float
    returned: float
    completed: float
    last: bool = False


def exposed_seconds(buckets: list[BucketTimes]) -> float:
    """Seconds of one backward pass during which the training thread waited for communication.

    `buckets` are one pass's buckets in launch order. The thread is held by each hook call
    until it returns (casting a bucket down, PowerSGD's factorisation, or on gloo a PowerSGD
    bucket's whole chain); and once the last bucket is handed over, the backward compute is
    done and DDP's backward returns only when every all-reduce has completed: from the last
    bucket's call to the latest completion the step waits for communication alone. A pass whose
    last bucket has not been launched contributes its hook calls only.
    """
    if not buckets:
        return 0.0
    spans = [(b.called, b.returned) for b in buckets]
    if buckets[-1].last:
        spans[-1] = (buckets[-1].called, max(b.completed for b in buckets))
    return union_seconds(spans)


@dataclass(frozen=True)
class _Span:
    """A bucket's marks as recorded: launch number, backward pass (round), hook call and
    return, all-reduce completion, and whether it was the pass's last bucket."""

    number: int
    backward_pass: int
    called: Mark
    returned: Mark
    completed: Mark
    last: bool


class TrafficMeter:
    """What this rank's gradient all-reduces cost since the last `take()`.

    - bytes: what the hooks put into all-reduces (`add_bytes`);
    - seconds: wall-clock time during which at least one bucket's all-reduce was in flight,
      from the hook's call (the bucket's gradients are ready) to the completion of the future
      it returns. DDP overlaps these all-reduces with the rest of the backward pass, so this
      is time spent in communication, not time added to the step by it;
    - exposed seconds: the time added to the step by it (`exposed_seconds`): the hook calls,
      and the wait from the last bucket's call to the end of the pass's last all-reduce;
    - rounds: synchronised steps, i.e. backward passes whose last bucket was all-reduced
      (micro-batches under `no_sync()` run no hook and count nothing).

    Thread-safe: gloo completes futures, and so runs the callbacks that record completions,
    on its own threads, while `take()` runs on the training thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes = 0
        self._launches = 0
        self._passes = 0  # backward passes whose last bucket was launched
        self._spans: list[_Span] = []
        self._rounds = 0

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self._bytes += n

    def timed(
        self, bucket: dist.GradBucket, launch: Callable[[], torch.futures.Future[torch.Tensor]]
    ) -> torch.futures.Future[torch.Tensor]:
        """Run `launch` (which starts `bucket`'s all-reduce) and time it until its future ends.

        Returns a future that completes after the completion is recorded: DDP waits for it
        before the backward pass returns, so a `take()` after the step sees the whole step.
        """
        device = bucket.buffer().device
        last = bucket.is_last()
        with self._lock:
            number, backward_pass = self._launches, self._passes
            self._launches += 1
            self._passes += int(last)
        start = mark(device)
        fut = launch()
        returned = mark(device)

        def record(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            end = mark(device)
            with self._lock:
                self._spans.append(_Span(number, backward_pass, start, returned, end, last))
                self._rounds += int(last)
            return f.value()  # re-raises the all-reduce's error, if any, to DDP

        return fut.then(record)

    def take(self) -> Traffic:
        """Bytes, seconds (in flight and exposed) and rounds since the last call; call it
        between steps.

        On CUDA the host waits here until the timed all-reduces have ended on the GPU (they
        usually have: the trainer reads the all-reduced gradients' norm on the host first).
        """
        with self._lock:
            n, spans, rounds = self._bytes, self._spans, self._rounds
            self._bytes, self._spans, self._rounds = 0, [], 0
        times = self._times(spans)
        return Traffic(
            bytes_sent=n,
            seconds=union_seconds([(t.called, t.completed) for _, t in times]),
            rounds=rounds,
            exposed_seconds=sum(
                (
                    exposed_seconds([t for r, t in times if r == backward_pass])
                    for backward_pass in sorted({r for r, _ in times})
                ),
                0.0,
            ),
        )

    @staticmethod
    def _times(spans: list[_Span]) -> list[tuple[int, BucketTimes]]:
        """(backward pass, marks in seconds) per bucket, in launch order."""
        if not spans:
            return []
        spans = sorted(spans, key=lambda span: span.number)
        # CUDA events only have differences: measure everything from the first launch.
        ref = spans[0].called
        return [
            (
                s.backward_pass,
                BucketTimes(
                    called=seconds_between(ref, s.called),
                    returned=seconds_between(ref, s.returned),
                    completed=seconds_between(ref, s.completed),
                    last=s.last,
                ),
            )
            for s in spans
        ]


def _mean_allreduce_hook(meter: TrafficMeter) -> Any:
    """DDP's native gradient averaging as a Python hook, so that it can be timed.

    Each rank multiplies its bucket by 1/world and the buckets are summed. That is what DDP's
    reducer does without a hook when the gradients are fresh tensors each step (it multiplies
    each one by 1/world as it copies it into the bucket): with `zero_grad(set_to_none=True)`,
    as the trainer does, the gradients are bitwise identical to DDP's own (tested on 2 and 3
    gloo ranks, with gradient accumulation). torch's `allreduce_hook` divides by world
    instead, which differs from DDP in the last bit when world is not a power of two. With
    `zero_grad(set_to_none=False)` DDP divides the gradients in place in their bucket views
    (`gradient_as_bucket_view=True`), so this hook can then differ from it in the last bit
    on such world sizes.
    """

    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = state if state is not None else dist.group.WORLD

        def launch() -> torch.futures.Future[torch.Tensor]:
            buffer = bucket.buffer()
            buffer.mul_(1.0 / dist.get_world_size(group))
            meter.add_bytes(buffer.numel() * buffer.element_size())
            fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
            return fut.then(lambda f: f.value()[0])

        return meter.timed(bucket, launch)

    return hook


def _cast_hook(dtype: torch.dtype, meter: TrafficMeter) -> Any:
    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = state if state is not None else dist.group.WORLD

        def launch() -> torch.futures.Future[torch.Tensor]:
            world = dist.get_world_size(group)
            buffer = bucket.buffer()
            compressed = buffer.to(dtype).div_(world)
            meter.add_bytes(compressed.numel() * compressed.element_size())
            fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

            def decompress(f: torch.futures.Future[Any]) -> torch.Tensor:
                buffer.copy_(f.value()[0])
                return buffer

            return fut.then(decompress)

        return meter.timed(bucket, launch)

    return hook


def _powersgd_bytes(bucket: dist.GradBucket, *, rank: int, compressing: bool) -> int:
    """Bytes PowerSGD all-reduces for `bucket`: P and Q factors for matrices, 1-D tensors raw."""
    if not compressing:
        return bucket.buffer().numel() * bucket.buffer().element_size()
    total = 0
    for grad in bucket.gradients():
        if grad.ndim <= 1:
            total += grad.numel() * grad.element_size()
        else:
            n, m = grad.shape[0], grad[0].numel()
            r = min(rank, n, m)
            total += (n + m) * r * grad.element_size()
    return total


class CommHook:
    """The hook attached to a DDP model: its traffic (`take`) and the hook's state.

    The state round-trips through a checkpoint: `state_dict()` holds tensors, numbers and plain
    containers only (it loads with `torch.load(weights_only=True)`), and `load_state_dict()`
    restores it into a freshly built DDP model and hook before their first step, so a resumed
    run computes the same gradients as an uninterrupted one. DDP's native all-reduce and the
    fp16/bf16 casts keep no state: their `state_dict()` is `{}`.
    """

    #: Whether the state differs between ranks, so that every rank saves and loads its own.
    per_rank: bool = False

    def __init__(self, hook: HookName, meter: TrafficMeter) -> None:
        self.hook = hook
        self._meter = meter

    def take(self) -> Traffic:
        """This rank's gradient all-reduces since the last call (see `TrafficMeter`).

        `bytes_sent`: bytes put into the all-reduces; `seconds`: time during which at least
        one was in flight (it overlaps the backward pass); `rounds`: synchronised steps.
        All zero without DDP and between calls with no synchronised step.
        """
        return self._meter.take()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def incompatibility(self, state: dict[str, Any]) -> str | None:
        """Why `state` cannot be loaded into this hook, or None when it can."""
        if state:
            saved_by = state.get("hook")
            return f"it was saved by comm.hook={saved_by!r}; this run's hook ({self.hook!r}) has no state"
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state`; raise ValueError (and change nothing) when it does not fit."""
        problem = self.incompatibility(state)
        if problem is not None:
            raise ValueError(f"cannot restore the gradient communication state: {problem}")


# Seeds each matrix's first Q (offset by the parameter's position in the model): the same on
# every rank, and independent of how DDP groups parameters into buckets.
_Q_SEED = 20_190_521


@dataclass(frozen=True)
class _Slot:
    """Where one parameter's PowerSGD state lies in its bucket's flat tensors.

    Mirrors `powerSGD_hook`: the error buffer is laid out like the bucket (parameters in bucket
    order, each `numel` long), while P and Q hold one `rows x r` / `cols x r` block per
    compressed matrix, grouped by matrix shape in order of first appearance.
    """

    name: str
    position: int
    start: int
    numel: int
    rows: int
    cols: int
    rank: int  # of this matrix's factors: min(rows, cols, matrix_approximation_rank)
    p: slice | None  # None: the parameter is all-reduced uncompressed (no P and Q)
    q: slice | None


def _bucket_slots(
    params: list[torch.Tensor], names: dict[int, tuple[str, int]], state: powersgd.PowerSGDState
) -> list[_Slot]:
    """The slots of one bucket's parameters, in the layout `powerSGD_hook` gives them."""
    shapes: list[tuple[int, int, int]] = []
    groups: dict[tuple[int, int], list[int]] = {}
    for i, param in enumerate(params):
        rows, cols = int(param.shape[0]), math.prod(param.shape[1:])  # tensor.view(rows, -1)
        r = min(rows, cols, state.matrix_approximation_rank)
        shapes.append((rows, cols, r))
        if powersgd._should_compress(rows, cols, r, state.min_compression_rate)[0]:
            groups.setdefault((rows, cols), []).append(i)
    p_slices: dict[int, slice] = {}
    q_slices: dict[int, slice] = {}
    p_at = q_at = 0
    for members in groups.values():
        for i in members:
            rows, cols, r = shapes[i]
            p_slices[i] = slice(p_at, p_at + rows * r)
            q_slices[i] = slice(q_at, q_at + cols * r)
            p_at, q_at = p_at + rows * r, q_at + cols * r
    slots: list[_Slot] = []
    start = 0
    for i, param in enumerate(params):
        if id(param) not in names:
            raise RuntimeError("a DDP bucket holds a parameter that the model does not list")
        name, position = names[id(param)]
        slots.append(
            _Slot(
                name=name,
                position=position,
                start=start,
                numel=param.numel(),
                rows=shapes[i][0],
                cols=shapes[i][1],
                rank=shapes[i][2],
                p=p_slices.get(i),
                q=q_slices.get(i),
            )
        )
        start += param.numel()
    return slots


class PowerSGDHook(CommHook):
    """PowerSGD's state, kept per parameter so that it outlives DDP's bucket layout.

    torch's `PowerSGDState` keys its error residuals and warm-start P/Q memories by bucket
    index. Those keys do not survive a restart: a freshly built DDP model runs its first step
    with its initial buckets (all parameters in one bucket, in torch 2.13) and regroups them by
    gradient order before its second step, while the saved state was keyed by the regrouped
    buckets of the old run. This class therefore records each bucket's layout when the hook
    runs, saves the state per parameter name, and rebuilds a bucket's entries from the
    per-parameter state whenever a bucket index appears with a layout other than the one its
    entries were made with. It also seeds each matrix's first Q itself, per parameter, so that
    torch's one draw per bucket (which depends on the layout) never happens.

    What differs between ranks: the error residuals (each rank's own compression error).
    What is the same on every rank: P and Q (they are all-reduced and then orthogonalised or
    averaged identically), `iter`, and the hyperparameters. The whole state is saved per rank.

    Bit-exact resume holds on 2 ranks (tested). On more ranks, a resumed run's first step uses
    DDP's initial buckets and the all-reduces sum elements in a layout-dependent order, so that
    step may differ in the last bits, as it does with DDP's own all-reduce.
    """

    per_rank = True

    def __init__(
        self, model: DistributedDataParallel, meter: TrafficMeter, state: powersgd.PowerSGDState
    ) -> None:
        super().__init__("powersgd", meter)
        self.state = state
        params = [(n, p) for n, p in model.module.named_parameters() if p.requires_grad]
        self._names = {id(p): (name, i) for i, (name, p) in enumerate(params)}
        self._shapes = {name: tuple(p.shape) for name, p in params}
        self._slots: dict[int, list[_Slot]] = {}  # bucket index -> layout its entries have
        self._pending: dict[str, dict[str, torch.Tensor]] = {}  # name -> error / p / q

    def prepare_bucket(self, bucket: dist.GradBucket) -> None:
        """Give torch's dicts `bucket`'s entries in its current layout; called by the hook for
        each bucket it compresses, before torch's hook runs."""
        index = bucket.index()
        slots = _bucket_slots(bucket.parameters(), self._names, self.state)
        recorded = self._slots.get(index)
        if recorded is not None and [s.name for s in recorded] != [s.name for s in slots]:
            # DDP regrouped its buckets. It hands buckets to the hook in index order, so the
            # entries from `index` on still hold the previous step's state, in the old layout.
            for stale in [i for i in self._slots if i >= index]:
                self._unpack(stale)
        if index not in self._slots:
            self._pack(index, slots, bucket.buffer())
        self._slots[index] = slots

    def _pack(self, index: int, slots: list[_Slot], buffer: torch.Tensor) -> None:
        """Build torch's entries for bucket `index` from the per-parameter state.

        A parameter without saved state starts as torch would start it (zero error) except for
        its first Q, which is seeded per parameter rather than per bucket.
        """
        like: dict[str, Any] = {"device": buffer.device, "dtype": buffer.dtype}
        error = torch.zeros(buffer.numel(), **like)
        p_memory = torch.zeros(sum(s.rows * s.rank for s in slots if s.p is not None), **like)
        q_memory = torch.empty(sum(s.cols * s.rank for s in slots if s.q is not None), **like)
        for s in slots:
            saved = self._pending.pop(s.name, {})
            if "error" in saved:
                error[s.start : s.start + s.numel] = saved["error"]
            if s.p is None or s.q is None:
                continue
            if "p" in saved:
                p_memory[s.p] = saved["p"]
            if "q" in saved:
                q_memory[s.q] = saved["q"]
            else:  # as torch draws it (on the CPU, in the bucket's dtype), from our seed
                g = torch.Generator().manual_seed(_Q_SEED + s.position)
                q_memory[s.q] = torch.randn(s.cols * s.rank, generator=g, dtype=buffer.dtype)
        st = self.state
        st.error_dict[index], st.p_memory_dict[index], st.q_memory_dict[index] = (
            error,
            p_memory,
            q_memory,
        )

    def _entries(self, index: int, *, clone: bool) -> dict[str, dict[str, torch.Tensor]]:
        """Bucket `index`'s entries in torch's dicts, split per parameter."""
        st = self.state
        error = st.error_dict.get(index)
        p, q = st.p_memory_dict.get(index), st.q_memory_dict.get(index)
        out: dict[str, dict[str, torch.Tensor]] = {}
        for s in self._slots[index]:
            entry: dict[str, torch.Tensor] = {}
            if error is not None:
                entry["error"] = error[s.start : s.start + s.numel]
            if s.p is not None and s.q is not None and p is not None and q is not None:
                entry["p"], entry["q"] = p[s.p], q[s.q]
            if entry:
                # Torch updates P and Q in place next step: a saved copy must not follow them.
                out[s.name] = {k: v.detach().clone() if clone else v for k, v in entry.items()}
        return out

    def _unpack(self, index: int) -> None:
        self._pending.update(self._entries(index, clone=False))
        del self._slots[index]
        for d in (self.state.error_dict, self.state.p_memory_dict, self.state.q_memory_dict):
            d.pop(index, None)

    # -- checkpointing ---------------------------------------------------------------------
    def _identity(self) -> dict[str, Any]:
        st = self.state
        group = st.process_group if st.process_group is not None else dist.group.WORLD
        return {
            "world_size": dist.get_world_size(group),
            "rank": dist.get_rank(group),
            "matrix_approximation_rank": st.matrix_approximation_rank,
            "start_powerSGD_iter": st.start_powerSGD_iter,
            "min_compression_rate": st.min_compression_rate,
            "orthogonalization_epsilon": st.orthogonalization_epsilon,
            "use_error_feedback": st.use_error_feedback,
            "warm_start": st.warm_start,
        }

    def state_dict(self) -> dict[str, Any]:
        """This rank's PowerSGD state, per parameter name; to be saved in a per-rank file.

        Keys: "hook", the identity that `load_state_dict` checks (world size, rank and the
        hyperparameters), "iter" (steps the hook has run, warm-up included), "stats" (torch's
        compression counters, for its log only) and "params": name -> {"error": flat residual,
        "p", "q": flat warm-start factors (compressed matrices only)}.
        """
        st = self.state
        params = {
            n: {k: v.detach().clone() for k, v in e.items()} for n, e in self._pending.items()
        }
        for index in self._slots:
            params.update(self._entries(index, clone=True))
        return {
            "hook": "powersgd",
            **self._identity(),
            "iter": int(st.iter),
            "stats": {
                "numel_before": int(st.total_numel_before_compression),
                "numel_after": int(st.total_numel_after_compression),
                "next_report": int(st.next_stats_report),
            },
            "params": params,
        }

    def incompatibility(self, state: dict[str, Any]) -> str | None:
        if state.get("hook") != "powersgd":
            return (
                f"it was saved by comm.hook={state.get('hook', 'none')!r}; this run uses 'powersgd'"
            )
        for key, want in self._identity().items():
            if state.get(key) != want:
                return f"it was saved with {key}={state.get(key)!r}; this run has {want!r}"
        if not isinstance(state.get("iter"), int) or not isinstance(state.get("params"), dict):
            return "it lacks 'iter' or 'params'"
        r = self.state.matrix_approximation_rank
        for name, entry in state["params"].items():
            shape = self._shapes.get(name)
            if shape is None:
                return f"it has state for a parameter {name!r} that this model lacks"
            rows, cols = shape[0], math.prod(shape[1:])
            want_numel = {"error": rows * cols, "p": rows * min(rows, cols, r)}
            want_numel["q"] = cols * min(rows, cols, r)
            for key, tensor in entry.items():
                fits = isinstance(tensor, torch.Tensor) and key in want_numel
                if not fits or tensor.numel() != want_numel[key]:
                    return f"its {key!r} for {name!r} does not fit a parameter of shape {shape}"
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()` of this rank, before the first step of a new DDP model.

        Raises ValueError, leaving the hook as it was, when the state was saved by another
        hook, world size or rank, with other PowerSGD settings, or for other parameters. Every
        rank must load (or every rank must skip): ranks whose `iter` differ issue different
        collectives.
        """
        super().load_state_dict(state)
        st = self.state
        for d in (st.error_dict, st.p_memory_dict, st.q_memory_dict):
            d.clear()
        self._slots.clear()
        self._pending = {name: dict(entry) for name, entry in state["params"].items()}
        st.iter = state["iter"]
        stats = state.get("stats", {})
        st.total_numel_before_compression = int(stats.get("numel_before", 0))
        st.total_numel_after_compression = int(stats.get("numel_after", 0))
        st.next_stats_report = int(stats.get("next_report", 0))


def _powersgd_counting_hook(
    meter: TrafficMeter, cfg: CommConfig, handle: PowerSGDHook, *, serialize: bool
) -> Any:
    """torch's PowerSGD hook, metering its traffic and keeping `handle`'s per-parameter state.

    The hook chains three all-reduces per bucket (uncompressed 1-D tensors, then P, then Q),
    issuing the later ones from future callbacks. Gloo runs those callbacks on its own threads,
    so with several buckets in flight two ranks can issue the same collectives in different
    orders, which gloo detects as a size mismatch and aborts. `serialize` (gloo) waits for each
    bucket's chain before returning, so every rank issues collectives in bucket order; it gives
    up the overlap of communication with the rest of the backward pass, not correctness.
    A bucket's time runs from the hook's call to the end of its whole chain.
    """

    def hook(
        state: powersgd.PowerSGDState, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        def launch() -> torch.futures.Future[torch.Tensor]:
            compressing = state.iter >= state.start_powerSGD_iter
            meter.add_bytes(
                _powersgd_bytes(bucket, rank=cfg.powersgd_rank, compressing=compressing)
            )
            if compressing:
                handle.prepare_bucket(bucket)
            fut = powersgd.powerSGD_hook(state, bucket)
            if not serialize:
                return fut
            done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            done.set_result(fut.wait())
            return done

        return meter.timed(bucket, launch)

    return hook


def attach_comm_hook(model: Any, cfg: CommConfig) -> CommHook:
    """Register the configured hook on a DDP model; return its handle (traffic and state).

    Without DDP (one process) nothing is communicated: the traffic stays at zero and the
    state is empty.
    """
    meter = TrafficMeter()
    if not isinstance(model, DistributedDataParallel):
        return CommHook("none", meter)
    match cfg.hook:
        case "none":  # DDP's own averaging, in Python only to time it (bitwise the same)
            model.register_comm_hook(None, _mean_allreduce_hook(meter))
        case "fp16":
            model.register_comm_hook(None, _cast_hook(torch.float16, meter))
        case "bf16":
            model.register_comm_hook(None, _cast_hook(torch.bfloat16, meter))
        case "powersgd":
            # PowerSGDHook's per-parameter state assumes both (see its docstring).
            state = powersgd.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=cfg.powersgd_rank,
                start_powerSGD_iter=cfg.powersgd_start_step,
                use_error_feedback=True,
                warm_start=True,
            )
            handle = PowerSGDHook(model, meter, state)
            serialize = dist.get_backend() == "gloo"
            model.register_comm_hook(
                state, _powersgd_counting_hook(meter, cfg, handle, serialize=serialize)
            )
            return handle
    return CommHook(cfg.hook, meter)
