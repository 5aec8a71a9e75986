"""PowerSGD (Vogels et al., 2019) through torch's `powerSGD_hook`, metered, with its state kept
per parameter (`PowerSGDHook`) so that a checkpoint restores it exactly whatever DDP's buckets."""

# No `from __future__ import annotations`: DDP inspects hook annotations at registration.

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel

from vidscale.distributed.sync.comm_handle import CommConfig, CommHook
from vidscale.distributed.sync.comm_timing import TrafficMeter


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


def powersgd_counting_hook(
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
