"""The training entry point: `train(cfg, run_dir=...)` and the step you can read on one screen.

Synchronous data-parallel SGD (TSM paper §4): every optimizer step all-reduces gradients over
all ranks (DDP's ring all-reduce); `optim.accumulate = K` runs K micro-batches per step with the
all-reduce only on the last, simulating a K-times larger cluster. LR follows the large-batch recipe
(linear scaling, warmup, cosine) as a pure function of the optimizer step, so resume is exact.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vidscale.config import RunConfig, save_config, validate
from vidscale.distributed.collectives import all_gather_object, all_reduce_max, broadcast_buffers
from vidscale.distributed.comm_hooks import attach_comm_hook
from vidscale.distributed.ddp import gradient_sync, unwrap, wrap_ddp
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.optim.factory import build_optimizer
from vidscale.train import builders
from vidscale.train.checkpoint import load_checkpoint, prune_checkpoints, save_checkpoint
from vidscale.train.evaluate import EvalResult, evaluate, topk_hits
from vidscale.train.host_memory import retain_freed_host_memory
from vidscale.train.metrics import MetricsLog, plot_run, progress, read_metrics
from vidscale.train.plan import make_plan, step_lr
from vidscale.train.summary import RunCounters, write_summary


@dataclass
class StepResult:
    loss: float
    hits: int
    count: int
    wait_s: float
    skipped: list[tuple[str, str]] = field(default_factory=list)


def seed_step(cfg: RunConfig, env: DistEnv, step: int) -> None:
    """Dropout and any other in-model randomness: a pure function of (seed, rank, step)."""
    torch.manual_seed((cfg.train.seed * 1_000_003 + env.rank * 7_919 + step) % (2**63))


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterator[dict[str, Any]],
    *,
    accumulate: int,
    lr: float,
    prepare: Callable[[torch.Tensor], torch.Tensor],
    autocast: Callable[[], Any],
    device: torch.device,
) -> StepResult:
    """One optimizer step over `accumulate` micro-batches; the all-reduce runs on the last."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    result = StepResult(loss=0.0, hits=0, count=0, wait_s=0.0)
    for micro in range(accumulate):
        t0 = time.perf_counter()
        batch = next(batches)  # blocked time here is data loading not hidden by compute
        result.wait_s += time.perf_counter() - t0
        clips = prepare(batch["clip"].to(device, non_blocking=True))
        labels = batch["label"].to(device, non_blocking=True)
        # no_sync on all but the last micro-batch: one all-reduce per optimizer step.
        with gradient_sync(model, sync=micro == accumulate - 1), autocast():
            logits = model(clips)
            loss = nn.functional.cross_entropy(logits.float(), labels) / accumulate
            loss.backward()
        result.loss += loss.item()
        result.hits += int(topk_hits(logits.detach(), labels, 1))
        result.count += labels.numel()
        result.skipped.extend(batch["skipped"])
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return result


class Trainer:
    """Holds the built pieces of one run and runs its epochs."""

    def __init__(self, cfg: RunConfig, run_dir: Path, env: DistEnv, *, resume: bool) -> None:
        validate(cfg)
        splits = builders.load_splits(cfg)
        cfg = builders.resolve_num_classes(cfg, splits.classes)
        self.cfg, self.run_dir, self.env, self.splits = cfg, run_dir, env, splits
        builders.set_threads(cfg, env)
        self.fast = builders.fast_path(cfg, env)
        # Before the model and the loader workers allocate (see `host_memory`: CPU steps
        # otherwise page-fault their activation buffers back in every step).
        self.host_memory_retained = (
            env.device.type == "cpu"
            and cfg.train.fast_path
            and cfg.train.retain_host_memory
            and retain_freed_host_memory()
        )
        torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank and run
        self.model = builders.build_model(cfg, env, self.fast)
        if self.fast.compile:
            self.model.compile()  # in place: state_dict keys and DDP's no_sync stay as they are
        self.optimizer = build_optimizer(self.model, cfg.optim, lr=0.0)
        self.ddp_model = wrap_ddp(self.model, env, bucket_cap_mb=cfg.comm.bucket_cap_mb)
        self.comm_bytes = attach_comm_hook(self.ddp_model, cfg.comm)
        self.plan = make_plan(cfg, world_size=env.world_size, train_size=len(splits.train))
        self.train_data = builders.build_train_data(
            cfg, env, splits.train, accumulate=self.plan.accumulate
        )
        self.val_loader = builders.build_eval_loader(cfg, env, splits.val)
        self.prepare = builders.input_preparer(cfg, env)
        self.autocast = self.fast.autocast()
        self.counters = RunCounters()
        self.epoch, self.step, self.step_in_epoch = 0, 0, 0
        if env.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            save_config(cfg, run_dir / "config.json")
            # The class names travel with the run, so predict/export need no dataset.
            (run_dir / "classes.txt").write_text("\n".join(splits.classes) + "\n")
            print(f"vidscale: {env.world_size} process(es), {self.fast.describe()}", flush=True)
        if resume:
            self._restore()
        self.log = MetricsLog(run_dir, enabled=env.is_main)

    # -- checkpoints -------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {
            "model": unwrap(self.model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "step": self.step,
            "step_in_epoch": self.step_in_epoch,
            "counters": self.counters.as_dict(),
            "model_name": self.cfg.model.name,
            "num_classes": self.cfg.model.num_classes,
        }

    def save(self, *, epoch_end: bool) -> None:
        if not self.env.is_main:
            return
        state = self._state()
        ckpt_dir = self.run_dir / "checkpoints"
        if epoch_end:
            save_checkpoint(state, ckpt_dir / f"epoch_{self.epoch:04d}.pt")
            prune_checkpoints(self.run_dir, keep=self.cfg.train.keep_checkpoints)
        save_checkpoint(state, ckpt_dir / "last.pt")

    def _restore(self) -> None:
        path = self.run_dir / "checkpoints" / "last.pt"
        if not path.exists():
            raise FileNotFoundError(f"--resume: no checkpoint at {path}")
        state = load_checkpoint(path, map_location=self.env.device)
        unwrap(self.model).load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.step_in_epoch = int(state["step_in_epoch"])
        self.counters = RunCounters.from_dict(state["counters"])
        if self.env.is_main:  # drop log lines written after the checkpoint
            kept = [
                r for r in read_metrics(self.run_dir / "metrics.jsonl") if r["step"] <= self.step
            ]
            (self.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))

    # -- epochs ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        mark = time.perf_counter()
        while self.epoch < self.cfg.train.epochs:
            train_stats = self.train_epoch()
            val = None
            if (self.epoch + 1) % self.cfg.train.eval_every == 0 or (
                self.epoch + 1 == self.cfg.train.epochs
            ):
                val = self.validate()
            self.log_epoch(train_stats, val)
            self.epoch += 1
            self.step_in_epoch = 0
            now = time.perf_counter()
            self.counters.wall_seconds += now - mark
            mark = now
            self.save(epoch_end=True)
        return self.finish()

    def train_epoch(self) -> dict[str, float]:
        cfg, plan = self.cfg, self.plan
        self.train_data.set_epoch(self.epoch, step_in_epoch=self.step_in_epoch)
        batches = iter(self.train_data.loader)
        self.ddp_model.train()
        sums = {"loss": 0.0, "hits": 0, "count": 0, "wait": 0.0, "time": 0.0}
        bar = progress(
            plan.steps_per_epoch,
            enabled=self.env.is_main and cfg.train.progress,
            desc=f"epoch {self.epoch + 1}/{cfg.train.epochs}",
            initial=self.step_in_epoch,
        )
        epoch_start = time.perf_counter()
        while self.step_in_epoch < plan.steps_per_epoch:
            t0 = time.perf_counter()
            lr = step_lr(plan, cfg, self.step)
            seed_step(cfg, self.env, self.step)
            result = train_step(
                self.ddp_model,
                self.optimizer,
                batches,
                accumulate=plan.accumulate,
                lr=lr,
                prepare=self.prepare,
                autocast=self.autocast,
                device=self.env.device,
            )
            dt = time.perf_counter() - t0
            self.step += 1
            self.step_in_epoch += 1
            self.counters.add_step(result, seconds=dt, global_batch=plan.global_batch)
            for key, value in (("loss", result.loss), ("hits", result.hits)):
                sums[key] += value
            sums["count"] += result.count
            sums["wait"] += result.wait_s
            sums["time"] += dt
            bar.update(1)
            bar.set_postfix(
                loss=f"{result.loss:.3f}",
                lr=f"{lr:.3g}",
                clips_s=f"{plan.global_batch / dt:.1f}",
            )
            sent = self.comm_bytes.take()
            self.counters.allreduce_bytes += sent
            if self.step % cfg.train.log_every == 0:
                self.log.write(
                    "train",
                    step=self.step,
                    loss=result.loss,
                    lr=lr,
                    epoch=self.epoch,
                    allreduce_bytes=sent,
                    clips_per_second=plan.global_batch / dt,
                )
            if cfg.train.checkpoint_every_steps and (
                self.step % cfg.train.checkpoint_every_steps == 0
            ):
                self.save(epoch_end=False)
        bar.close()
        del batches
        steps = max(plan.steps_per_epoch, 1)
        return {
            "train_loss": sums["loss"] / steps,
            "train_top1": 100.0 * sums["hits"] / max(sums["count"], 1),
            "epoch_seconds": time.perf_counter() - epoch_start,
            "data_wait_fraction": sums["wait"] / max(sums["time"], 1e-9),
        }

    def validate(self) -> EvalResult:
        # Ranks' BN statistics drift apart under DDP: evaluate (and save) rank 0's.
        broadcast_buffers(self.model)
        result = evaluate(
            self.model,
            self.val_loader,
            prepare=self.prepare,
            device=self.env.device,
            autocast=self.autocast,
        )
        self.counters.add_skipped(result.skipped)
        return result

    def log_epoch(self, train_stats: dict[str, float], val: EvalResult | None) -> None:
        wait = all_reduce_max(train_stats["data_wait_fraction"])
        values: dict[str, Any] = {**train_stats, "data_wait_fraction": wait}
        values["epoch"] = self.epoch + 1
        values["lr"] = step_lr(self.plan, self.cfg, self.step)
        if val is not None:
            values.update(val_top1=val.top1, val_top5=val.top5, val_loss=val.loss)
            values["val_count"] = val.count
            self.counters.add_val(val.top1)
        self.log.write("epoch", step=self.step, **values)
        if self.env.is_main:
            msg = (
                f"epoch {self.epoch + 1}/{self.cfg.train.epochs}: "
                f"train loss {train_stats['train_loss']:.4f} top1 {train_stats['train_top1']:.1f}"
            )
            if val is not None:
                msg += f" | val top1 {val.top1:.2f} top5 {val.top5:.2f} ({val.count} videos)"
            msg += f" | {train_stats['epoch_seconds']:.1f}s, data wait {100 * wait:.1f}%"
            print(msg, flush=True)

    def finish(self) -> dict[str, Any]:
        merged = all_gather_object(self.counters.as_dict())
        summary = RunCounters.merge(merged).summary(
            model=self.cfg.model.name,
            world_size=self.env.world_size,
            global_batch=self.plan.global_batch,
            epochs=self.cfg.train.epochs,
            num_classes=self.cfg.model.num_classes,
            extra={
                "recipe": self.cfg.recipe,
                "base_lr": self.plan.base_lr,
                "fast_path": self.fast.describe(),
                "host_memory_retained": self.host_memory_retained,
            },
        )
        if self.env.is_main:
            write_summary(summary, self.run_dir / "summary.json")
            plot_run(read_metrics(self.run_dir / "metrics.jsonl"), self.run_dir)
        self.log.close()
        return summary

    def stop_loader_workers(self) -> None:
        """End the loaders' worker processes now. They persist for the run and would otherwise
        live until the loaders are collected: in a process that trains again (a sweep), at an
        unknown moment, possibly while the next run forks its own workers."""
        del self.train_data, self.val_loader


def train(cfg: RunConfig, *, run_dir: Path, resume: bool = False) -> dict[str, Any]:
    """Train (and evaluate every epoch) as one process or one rank of a torchrun job."""
    env = init_distributed(cfg.train.device)
    trainer = Trainer(replace(cfg), run_dir, env, resume=resume)
    try:
        return trainer.run()
    finally:
        trainer.stop_loader_workers()
