"""`vidscale bench network`: scaling from one node to two across a real link, at several rates
(TSM paper §3c "Networking Efficiency", Fig. 3c; AAVG paper §1: communication-bound clusters).

One process per node, one core each. First one process measures every model alone (`bench
scaling --nproc 1`, pinned to core 0): the baseline of every efficiency, and the planner's one
input about compute. Then two such processes at once, one a core, with no communication
(`co_running`): what each node computes when two nodes share this machine's memory and caches,
as the two-node rows' nodes do (a cluster's nodes would not; `bench cluster` can give its
stand-ins this step for the check against those rows). Then two nodes in lockstep across an
unshaped link with almost nothing to send (`lockstep`): the same layers on both cores at the
same time every step, as the two-node rows compute, which `bench cluster --standin-compute
lockstep` gives its stand-ins for that check. Then, for each rate, two namespaces
joined by a veth shaped to it (`vidscale.netlab`) run `bench scaling` as a two-node torchrun
job (node N on core N) for DDP with each hook and AAVG at `--aavg-k`, and again for AAVG at
`--epoch-k`, each pass reading the baseline (`--baseline`), so that every row has its speed-up
and efficiency. Each rate's link is also measured: one TCP stream's throughput, and gloo's
all-reduce across it (`distributed.peers.link_probe`: a small one's time, large ones'
bandwidth), the link's two numbers in the paper's Eq. 1 for the planner. Each model's hooks'
own compute is measured on one process (`hook_cost`).

Every row then gets the planner's prediction (`planner.link_model.predict_step`) from the
one-process step, the hooks' one-process compute, the link's all-reduce latency and bandwidth
and the model alone, and its error against the measured two-node step (`report.build`). Needs
root; without it, one line says why.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from vidscale.bench.network.config import NetworkConfig
from vidscale.bench.network.report import LinkMeasurement, NetworkResult, build, plot_network
from vidscale.bench.results import write_result
from vidscale.bench.scaling.config import ScalingConfig
from vidscale.bench.scaling.measure import ScalingRunFailed, as_argv
from vidscale.bench.scaling.result import ScalingResult, ScalingRun
from vidscale.errors import ConfigError
from vidscale.netlab import nodes
from vidscale.netlab.link import Rate, TwoNodeLink, unavailable
from vidscale.netlab.probe import throughput_bits

PASS_TIMEOUT_S = 1800.0


def run(
    cfg: NetworkConfig, *, out_json: Path, plot: Path | None, progress: bool = True
) -> NetworkResult:
    """Measure `cfg` (see the module docstring), write the JSON (and the plot); the result.
    `ConfigError` for a bad request or a machine without namespaces, `ScalingRunFailed` when
    a measurement's processes fail."""
    cfg.check()
    reason = unavailable()
    if reason is not None:
        raise ConfigError(f"bench network: {reason}")
    with tempfile.TemporaryDirectory(prefix="vidscale-network-") as tmp:
        work = Path(tmp)
        baseline = ScalingResult.read(_one_process(cfg, work, progress=progress))
        co_running = _co_running(cfg, baseline, work, progress=progress)
        lockstep = _lockstep(cfg, work, progress=progress)
        hooks = {m: _hook_compute(cfg, baseline, m, work) for m in cfg.models}
        measured = [_at_rate(cfg, Rate.parse(t), work, progress=progress) for t in cfg.rates]
    result = build(cfg, baseline, measured, hooks, co_running=co_running, lockstep=lockstep)
    write_result(out_json, result.to_dict())
    if plot is not None:
        plot_network(result, plot)
    return result


def _pinned(core: int) -> None:
    os.sched_setaffinity(0, {core})


def _one_thread() -> dict[str, str]:
    """The environment of a one-core process: one node's compute, as every row measures it."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _one_process_cmd(scaling: ScalingConfig, out: Path, plot: Path) -> list[str]:
    """`bench scaling --nproc 1` of `scaling`, writing `out` (and `plot`)."""
    bench = [sys.executable, "-m", "vidscale", "bench", "scaling", *as_argv(scaling)]
    return [*bench, "--nproc", "1", "--out-json", str(out), "--plot", str(plot)]


def _one_process(cfg: NetworkConfig, work: Path, *, progress: bool) -> Path:
    """The one-process rows (and the fast-path decisions), on core 0 with one thread."""
    out = work / "one_process.json"
    if progress:
        print("bench network: one process, the baseline", flush=True)
    cmd = _one_process_cmd(cfg.scaling(), out, work / "one_process.png")
    done = subprocess.run(cmd, env=_one_thread(), preexec_fn=lambda: _pinned(0), check=False)
    if done.returncode or not out.is_file():
        raise ScalingRunFailed(f"the one-process baseline exited with {done.returncode}")
    return out


def _co_running(
    cfg: NetworkConfig, baseline: ScalingResult, work: Path, *, progress: bool
) -> dict[str, list[float]]:
    """Each model's one-process step while a second process runs the same steps on the other
    core, both processes' (core 0's first), with the baseline's fast-path settings; {} on one
    core."""
    if len(os.sched_getaffinity(0)) < 2:
        return {}
    if progress:
        print("bench network: two processes at once, one a core, no communication", flush=True)
    scaling = replace(cfg.scaling(), fast_settings=baseline.settings.fast_settings)
    jobs = []
    try:
        for core in (0, 1):
            out = work / f"co_running_{core}.json"
            cmd = _one_process_cmd(scaling, out, work / f"co{core}.png")
            pin = functools.partial(_pinned, core)
            jobs.append((out, subprocess.Popen(cmd, env=_one_thread(), preexec_fn=pin)))
        codes = [job.wait() for _, job in jobs]  # both, before either's failure is raised
    finally:  # an interrupt (Ctrl-C, SIGTERM) must not leave them running
        for _, job in jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
    if any(codes) or not all(out.is_file() for out, _ in jobs):
        raise ScalingRunFailed(f"the co-running one-process runs exited with {codes}")
    steps: dict[str, list[float]] = {}
    for out, _ in jobs:
        for found in ScalingResult.read(out).runs:
            if found.procs == 1:
                steps.setdefault(found.model, []).append(found.step_s)
    return steps


def _lockstep(cfg: NetworkConfig, work: Path, *, progress: bool) -> dict[str, float]:
    """Each model's compute per step on two nodes stepping together across an unshaped link
    with almost nothing to send: AAVG averaging once, at its last measured step
    (`NetworkConfig.lockstep_pass`), so every step is the same layers on both cores at the same
    time and one small agreement, as in the two-node rows. Two processes each on its own
    (`_co_running`) interleave their layers at random instead."""
    with TwoNodeLink() as link:
        link.shape(Rate.parse("unshaped"))
        if progress:
            print(
                "bench network: two nodes in lockstep, unshaped link, nothing to send", flush=True
            )
        runs = _two_node_pass(link, cfg.lockstep_pass(), work, "lockstep")
    return {run.model: run.compute_s for run in runs}


def _two_node_pass(
    link: TwoNodeLink, scaling: ScalingConfig, work: Path, name: str
) -> list[ScalingRun]:
    """The two-node rows of `bench scaling` as `scaling` says, one node a namespace of `link`,
    at the one-process baseline's fast-path settings."""
    out = work / f"{name}.json"
    args = ["bench", "scaling", *as_argv(scaling), "--baseline", str(work / "one_process.json")]
    args += ["--out-json", str(out), "--plot", str(work / f"{name}.png")]
    job = nodes.start(link, args, log_dir=work / f"{name}_logs")
    try:
        codes = job.wait(PASS_TIMEOUT_S)
    finally:
        job.stop()
    if codes != [0, 0] or not out.is_file():
        raise ScalingRunFailed(f"the two-node run {name} exited {codes}; {job.failure(codes)}")
    return [r for r in ScalingResult.read(out).runs if r.procs == 2]


def _hook_compute(
    cfg: NetworkConfig, baseline: ScalingResult, model: str, work: Path
) -> dict[str, float]:
    """Each hook's compute per step for `model` on one process (`hook_cost`), on core 0."""
    hooks = [h for h in cfg.hooks if h != "none"]
    if not hooks:
        return {}
    out = work / f"hooks_{model}.json"
    setting = next(
        (s.partition("=")[2] for s in baseline.settings.fast_settings if s.startswith(f"{model}=")),
        "fp32",
    )
    cmd = [sys.executable, "-m", "vidscale.bench.network.hook_cost", "--out", str(out)]
    cmd += ["--bucket-cap-mb", str(cfg.bucket_cap_mb), "--setting", setting]
    cmd += [model, str(cfg.frames), str(cfg.size), str(cfg.batch), str(cfg.num_classes), *hooks]
    done = subprocess.run(cmd, env=_one_thread(), preexec_fn=lambda: _pinned(0), check=False)
    if done.returncode or not out.is_file():
        raise ScalingRunFailed(f"the hook cost of {model} exited with {done.returncode}")
    costs: dict[str, float] = json.loads(out.read_text())["hook_compute_s"]
    return costs


def _probe(link: TwoNodeLink, rate: Rate, work: Path) -> LinkMeasurement:
    """The link at `rate`: a TCP stream, and gloo's all-reduce across it."""
    out = work / f"probe_{rate.label}.json"
    job = nodes.start(
        link,
        ["--out", str(out)],
        log_dir=work / f"probe_{rate.label}_logs",
        module="vidscale.distributed.peers.link_probe",
    )
    try:
        codes = job.wait(600)
    finally:
        job.stop()
    if codes != [0, 0] or not out.is_file():
        raise ScalingRunFailed(f"the all-reduce probe at {rate.label} exited {codes}")
    found = json.loads(out.read_text())
    return LinkMeasurement(
        rate=rate.label,
        shaped_bits_per_s=rate.bits_per_s,
        tcp_bits_per_s=throughput_bits(link),
        latency_s=found["latency_s"],
        allreduce_bytes_per_s=found["bytes_per_s"],
    )


def _at_rate(
    cfg: NetworkConfig, rate: Rate, work: Path, *, progress: bool
) -> tuple[LinkMeasurement, list[ScalingRun]]:
    """The link at `rate` measured, and every two-node run of every pass across it."""
    runs: list[ScalingRun] = []
    with TwoNodeLink() as link:
        link.shape(rate)
        probe = _probe(link, rate, work)
        if progress:
            print(f"bench network: link {probe.describe()}", flush=True)
        for index, scaling in enumerate(cfg.passes()):
            runs += _two_node_pass(link, scaling, work, f"{rate.label}_{index}")
    return probe, runs
