"""`vidscale bench cluster`: efficiency against the number of nodes on one machine's cluster
network (TSM paper Table 3 and Fig. 3c in miniature; docs/design.md "A cluster on one machine").

For each link rate: a two-node cluster's link is probed (`distributed.peers.link_probe`: a
small all-reduce's time, large ones' bandwidth: the planner's only knowledge of the link); then
for each node count N a cluster of N nodes (`netlab.cluster`), every link shaped to the rate,
runs one stand-in rank per node (`rank`, node K's agent on core K mod `cores`) through every
model and variant. The ranks' compute is the one-node step of `baseline` (a `bench network`
JSON measured on this machine; its step alone, or with this machine's contention between two
nodes: `standin_compute`), split by `standin.ComputeProfile` and shortened by the
stand-in's own work; both the optimizer's part and that work are measured first on one process
(`calibrate`). The straggler runs repeat DDP and AAVG at one N with node 1's
link slower, then with its compute slower; the two-rack runs repeat them with the nodes on two
switches joined by one trunk. A pass whose ranks fail is named in the result's
`settings["failed"]` and the others still count. `report.build` joins the rows with the planner's
predictions (`planner.cluster_model`), the table, the JSON and the plot. `vidscale bench
cluster` runs it inside `netlab.link.ending_on_sigterm`, so a SIGTERM tears the clusters down.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

from vidscale.bench.cluster.calibrate import alone_step_s, optimizer_tail_s, own_work_s
from vidscale.bench.cluster.config import ClipShape, ClusterConfig
from vidscale.bench.cluster.layer_times import measure_backward
from vidscale.bench.cluster.rank import RankSpec
from vidscale.bench.cluster.report import (
    Calibration,
    ClusterResult,
    ProbedLink,
    build,
    format_calibration,
    pass_name,
    plot_cluster,
)
from vidscale.bench.cluster.standin import ComputeProfile
from vidscale.bench.results import write_result
from vidscale.errors import InputError
from vidscale.netlab import nodes
from vidscale.netlab.cluster import Cluster
from vidscale.netlab.link import Rate, unavailable
from vidscale.planner.cluster_model import trunk_hops

PASS_TIMEOUT_S = 1800.0


class ClusterRunFailed(RuntimeError):
    """A pass's ranks failed; the message has rank 0's last lines."""


def _profiles(
    models: tuple[str, ...], waited: dict[str, float], calibration: Calibration
) -> dict[str, ComputeProfile]:
    """What a rank waits, per model, for a one-node step of `waited[model]`: it split by the
    optimizer's tail, then forward and backward, layer by layer, as `calibration.backward`
    measured them (`layer_times`), less the stand-in's own work (`calibrate`)."""
    return {
        m: ComputeProfile.from_step(
            waited[m],
            tail_s=calibration.tail_s[m],
            backward_fraction=calibration.backward[m].fraction,
            backward_shares=calibration.backward[m].shares,
        ).less(calibration.own_s[m])
        for m in models
    }


def _spec(
    cfg: ClusterConfig,
    baseline: dict[str, Any],
    calibration: Calibration,
    rate: str,
) -> RankSpec:
    """What every rank of a pass at `rate` does (the waits `rate`'s for `in_pass` compute)."""
    shape = ClipShape.of(baseline["settings"])
    profiles = _profiles(cfg.models, cfg.waited_steps(baseline, rate), calibration)
    return RankSpec(
        models=cfg.models,
        profiles={m: asdict(profile) for m, profile in profiles.items()},
        variants=tuple(cfg.variants()),
        steps=cfg.steps,
        warmup=cfg.warmup,
        batch=shape.batch,
        frames=shape.frames,
        size=shape.size,
        num_classes=shape.num_classes,
        bucket_cap_mb=cfg.bucket_cap_mb,
        epoch_k=cfg.epoch_k,
    )


def calibrate_standins(cfg: ClusterConfig, baseline: dict[str, Any]) -> Calibration:
    """Each model's optimizer tail, stand-in own work and backward layer by layer on this
    process, and the calibrated stand-in's step alone (`calibrate`, `layer_times`)."""
    shape = ClipShape.of(baseline["settings"])
    measured = Calibration(
        tail_s={m: optimizer_tail_s(m, shape) for m in cfg.models},
        own_s={m: own_work_s(m, shape) for m in cfg.models},
        backward={m: measure_backward(m, shape) for m in cfg.models},
    )
    profiles = _profiles(cfg.models, cfg.waited_steps(baseline), measured)
    alone = {m: alone_step_s(m, shape, profiles[m]) for m in cfg.models}
    return replace(measured, alone_s=alone)


def _job(cluster: Cluster, module: str, args: list[str], work: Path, cores: int) -> None:
    logs = work / "logs"
    job = nodes.start(cluster, args, log_dir=logs, module=module, cores=tuple(range(cores)))
    try:
        codes = job.wait(PASS_TIMEOUT_S)
    finally:
        job.stop()
    if any(codes):
        raise ClusterRunFailed(
            f"{module} on {len(codes)} nodes exited {codes}; {job.failure(codes)}"
        )


def probe(rate: Rate, work: Path, cores: int) -> ProbedLink:
    """A two-node cluster's link at `rate` as gloo's all-reduce sees it."""
    out = work / f"probe_{rate.label}.json"
    with Cluster(2, rate=rate) as cluster:
        _job(cluster, "vidscale.distributed.peers.link_probe", ["--out", str(out)], work, cores)
    found = json.loads(out.read_text())
    return ProbedLink(rate.label, rate.bits_per_s, found["latency_s"], found["bytes_per_s"])


def one_pass(
    cfg: ClusterConfig,
    spec: RankSpec,
    n: int,
    rate: Rate,
    work: Path,
    *,
    slow_link: Rate | None = None,
    trunk: Rate | None = None,
) -> list[dict[str, Any]]:
    """Every model and variant of `spec` on `n` nodes at `rate` (node 1's link `slow_link`; two
    racks joined by a trunk at `trunk`)."""
    spec_path, out = work / f"spec_{n}_{rate.label}.json", work / f"out_{n}_{rate.label}.json"
    spec_path.write_text(json.dumps(spec.as_dict()))
    with Cluster(n, rate=rate, racks=1 if trunk is None else 2, trunk=trunk) as cluster:
        if slow_link is not None:
            cluster.shape(slow_link, node=1)
        _job(cluster, "vidscale.bench.cluster.rank", [str(spec_path), str(out)], work, cfg.cores)
    found = json.loads(out.read_text())
    racks_by_rank = [cluster.rack_of(node) for node in found["nodes_by_rank"]]
    rows: list[dict[str, Any]] = found["rows"]
    for row in rows:
        row.update(nodes=n, rate=rate.label, slow_link=slow_link.label if slow_link else None)
        row.update(trunk=trunk.label if trunk else None, trunk_hops=trunk_hops(racks_by_rank))
        row["slow_factor"] = spec.slow_factor if spec.slow_node >= 0 else 1.0
    return rows


def run(
    cfg: ClusterConfig, *, out_json: Path, plot: Path | None, progress: bool = True
) -> ClusterResult:
    """Measure `cfg` (see the module docstring), write the JSON (and the plot); the result."""
    cfg.check()
    reason = unavailable()
    if reason is not None:
        raise InputError(f"bench cluster: {reason}")
    baseline = cfg.read_baseline()
    calibration = calibrate_standins(cfg, baseline)
    if progress:
        print(format_calibration(calibration, cfg.waited_steps(baseline)), flush=True)
    specs = {rate: _spec(cfg, baseline, calibration, rate) for rate in cfg.rates}
    rows: list[dict[str, Any]] = []
    links: list[ProbedLink] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vidscale-cluster-") as tmp:
        for name, measure in _passes(cfg, specs, Path(tmp), links):
            if progress:
                print(f"bench cluster: {name}", flush=True)
            try:
                rows += measure()
            except ClusterRunFailed as err:  # the other passes still count; this one is named
                failed.append(f"{name}: {str(err).splitlines()[0]}")
                print(f"bench cluster: failed: {err}", flush=True)
    if not rows:
        raise ClusterRunFailed("every pass failed: " + "; ".join(failed))
    result = build(cfg, baseline, calibration, links, rows, failed=failed)
    write_result(out_json, result.to_dict())
    if plot is not None:
        plot_cluster(result, plot)
    return result


def _passes(
    cfg: ClusterConfig, specs: dict[str, RankSpec], work: Path, links: list[ProbedLink]
) -> Iterator[tuple[str, Callable[[], list[dict[str, Any]]]]]:
    """Every pass in order, named as `settings["failed"]` names a failed one (`pass_name`),
    each link rate probed (into `links`) as the passes reach it: the sweep (`specs`: each
    rate's), then the straggler runs and the two-rack runs, both DDP and AAVG at `aavg_k` on
    the first model at the first rate. A rate probed once is not probed again (a straggler's
    link at a trunk's rate, say): the same two-node link, the same figures."""

    def probe_once(rate: Rate) -> None:
        if all(link.rate != rate.label for link in links):
            links.append(probe(rate, work, cfg.cores))

    for text in cfg.rates:
        rate = Rate.parse(text)
        probe_once(rate)
        for n in cfg.nodes:
            yield pass_name(n, rate.label), partial(one_pass, cfg, specs[text], n, rate, work)
    first = Rate.parse(cfg.rates[0])
    narrow = replace(
        specs[cfg.rates[0]],
        models=cfg.models[:1],
        variants=(("ddp", "none", 0), ("aavg", "none", cfg.aavg_k)),
    )
    if cfg.straggler_nodes:
        n, slow_link = cfg.straggler_nodes, Rate.parse(cfg.straggler_rate)
        probe_once(slow_link)
        name = pass_name(n, first.label, stragglers=True)
        yield name, partial(_stragglers, cfg, narrow, n, first, slow_link, work)
    for text in cfg.trunk_rates if cfg.trunk_nodes else ():
        trunk, n = Rate.parse(text), cfg.trunk_nodes
        probe_once(trunk)
        name = pass_name(n, first.label, trunk=trunk.label)
        yield name, partial(one_pass, cfg, narrow, n, first, work, trunk=trunk)


def _stragglers(
    cfg: ClusterConfig, narrow: RankSpec, n: int, rate: Rate, slow_link: Rate, work: Path
) -> list[dict[str, Any]]:
    """`narrow` on `n` nodes at `rate`, node 1 slower: its link (`slow_link`), then its
    compute (`straggler_factor`)."""
    rows = one_pass(cfg, narrow, n, rate, work, slow_link=slow_link)
    slow_compute = replace(narrow, slow_node=1, slow_factor=cfg.straggler_factor)
    return rows + one_pass(cfg, slow_compute, n, rate, work)
