"""The GPU acceptance run's report: every step's JSON merged into one, and a markdown summary
that sets each figure beside its target.

`scripts/gpu_checks.sh` leaves in its work directory: `steps.tsv` (step, exit status, seconds,
time limit), `tests.xml` (pytest's JUnit report of the CUDA tests), `throughput.json`
(`bench throughput`), `shards.json` (`bench shard-train`) and `profile.json` (`bench profile`).
A run passes when every step exited 0 and no CUDA test failed or was skipped (a dry run on the
CPU expects them all skipped, with a reason); a target missed is a finding, not a failure.
Each step JSON is read by its bench's typed result (`ThroughputResult`, `ShardTrainResult`,
`ProfileResult`); one that does not parse is a problem naming the file and the key.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidscale.atomic import atomic_write_text
from vidscale.bench.compute.profile import ProfileResult
from vidscale.bench.compute.throughput import ThroughputResult
from vidscale.bench.data.shard_train import ShardTrainResult
from vidscale.bench.options import option
from vidscale.bench.results import write_result

SUMMARY = Path("summary.md")  # `bench gpu-report`'s markdown, unless --out-md names another
STEPS = ("setup", "tests", "throughput", "shards", "profile")
STEP_FILES = {"throughput": "throughput.json", "shards": "shards.json", "profile": "profile.json"}
# The result type each step's JSON is read with.
STEP_TYPES: dict[str, type[ThroughputResult] | type[ShardTrainResult] | type[ProfileResult]] = {
    "throughput": ThroughputResult,
    "shards": ShardTrainResult,
    "profile": ProfileResult,
}
TIMED_OUT = {124, 137}  # `timeout`'s status, and that of its KILL after the grace period
TSM, TSN, SLOWFAST = "tsm_resnet50", "tsn_resnet50", "slowfast_resnet50_8x8"
I3D_PAPER = {"i3d_resnet50_3x1x1": 2.0, "i3d_resnet50_3x3x3": 1.34}  # TSM paper Table 1 (P100)
SLOWFAST_RECORDED = 152.9  # clips/s recorded in docs/benchmarks.md


def read_steps(path: Path) -> dict[str, dict[str, Any]]:
    """steps.tsv as {step: {"status", "seconds", "limit_s"}}; status "ok", "timed out" or
    "failed (exit N)"."""
    steps: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return steps
    for line in path.read_text().splitlines():
        name, rc, seconds, limit = line.split("\t")
        if int(rc) == 0:
            status = "ok"
        else:
            status = "timed out" if int(rc) in TIMED_OUT else f"failed (exit {rc})"
        steps[name] = {"status": status, "seconds": float(seconds), "limit_s": float(limit)}
    return steps


def read_tests(path: Path) -> dict[str, Any] | None:
    """Counts and the skipped tests (with reasons) from a JUnit XML report; None if absent."""
    if not path.is_file():
        return None
    cases = list(ET.parse(path).getroot().iter("testcase"))
    counts = {"total": len(cases), "failed": 0, "errors": 0, "skipped": 0}
    skipped = []
    for case in cases:
        for kind, key in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            found = case.find(kind)
            if found is not None:
                counts[key] += 1
                if kind == "skipped":
                    name = f"{case.get('classname')}::{case.get('name')}"
                    skipped.append({"test": name, "reason": found.get("message") or ""})
    counts["passed"] = counts["total"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return counts | {"skipped_tests": skipped}


@dataclass(frozen=True)
class GpuReportConfig:
    """What `bench gpu-report` merges: the run's work directory `work`, the markdown summary
    to write (`out_md`), and whether it was a dry run on the CPU (`dry_run`: every CUDA test
    is expected skipped, with a reason). Each field but `work` (the positional WORK) is a
    flag (`bench.options`)."""

    work: Path
    out_md: Path = option(SUMMARY, help="the markdown summary to write")
    dry_run: bool = option(False, help="a run on the CPU: CUDA tests are expected skipped")


@dataclass(frozen=True)
class StepResults:
    """The benches' results the run left (None: absent, or unreadable: `unreadable` says
    why, one line each naming the file and the key)."""

    throughput: ThroughputResult | None = None
    shards: ShardTrainResult | None = None
    profile: ProfileResult | None = None
    unreadable: tuple[str, ...] = ()

    @classmethod
    def read(cls, work: Path) -> StepResults:
        """The step JSONs in `work` (`STEP_FILES`), each parsed by its bench's result type."""
        found: dict[str, Any] = {}
        unreadable = []
        for step, name in STEP_FILES.items():
            path = work / name
            if not path.is_file():
                continue
            try:
                found[step] = STEP_TYPES[step].read(path)
            except ValueError as err:
                unreadable.append(f"step {step}: {err}")
        return cls(**found, unreadable=tuple(unreadable))


@dataclass(frozen=True)
class GpuReport:
    """The GPU acceptance run's merged result (`bench gpu-report --out-json`): the
    environment, whether it was a dry run, each step's status (`read_steps`), the CUDA tests
    (`read_tests`; None: no report), the benches' results, each target and whether it was met
    (`targets`), and why the run fails (`problems`; none: it passed)."""

    environment: Mapping[str, Any]
    dry_run: bool
    steps: Mapping[str, Mapping[str, Any]]
    tests: Mapping[str, Any] | None
    results: StepResults
    targets: tuple[Mapping[str, Any], ...]
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The merged JSON: each bench's result as its own JSON, under its step's name."""
        r = self.results
        return {
            "environment": dict(self.environment),
            "dry_run": self.dry_run,
            "steps": {k: dict(v) for k, v in self.steps.items()},
            "tests": None if self.tests is None else dict(self.tests),
            **{
                step: None if result is None else result.to_dict()
                for step, result in (
                    ("throughput", r.throughput),
                    ("shards", r.shards),
                    ("profile", r.profile),
                )
            },
            "targets": [dict(t) for t in self.targets],
            "problems": list(self.problems),
            "passed": self.passed,
        }


def collect(work: Path, *, environment: Mapping[str, Any], dry_run: bool) -> GpuReport:
    """Everything the run left in `work`, its targets and whether it passed."""
    steps = read_steps(work / "steps.tsv")
    tests = read_tests(work / "tests.xml")
    results = StepResults.read(work)
    found = problems(steps, tests, dry_run=dry_run) + list(results.unreadable)
    return GpuReport(
        environment=environment,
        dry_run=dry_run,
        steps=steps,
        tests=tests,
        results=results,
        targets=tuple(targets(results)),
        problems=tuple(found),
    )


def problems(
    steps: Mapping[str, Mapping[str, Any]], tests: Mapping[str, Any] | None, *, dry_run: bool
) -> list[str]:
    """Why the run fails, one line each: a step missing, failed or timed out, a CUDA test
    failed or skipped (on the CPU: one not skipped, or skipped without a reason)."""
    found = []
    for step in STEPS:
        status = steps.get(step, {}).get("status", "missing")
        if status != "ok":
            found.append(f"step {step}: {status}")
    if tests is None or tests["total"] == 0:
        found.append("no CUDA tests ran (tests.xml missing or empty)")
        return found
    if tests["failed"] or tests["errors"]:
        found.append(f"CUDA tests: {tests['failed']} failed, {tests['errors']} errors")
    if dry_run:
        if tests["skipped"] != tests["total"]:
            found.append("dry run: a CUDA test ran on the CPU instead of skipping")
        if any(not s["reason"] for s in tests["skipped_tests"]):
            found.append("dry run: a CUDA test skipped without a reason")
    elif tests["skipped"]:
        names = ", ".join(s["test"] for s in tests["skipped_tests"])
        found.append(f"CUDA tests skipped: {names}")
    return found


def _rate(results: StepResults, model: str, *, compiled: bool | None) -> float | None:
    """clips/s of `model`: its eager or compiled row, or (None) the better of the two."""
    return None if results.throughput is None else results.throughput.rate(model, compiled=compiled)


def _target(name: str, value: float | None, goal: str, met: bool | None) -> dict[str, Any]:
    return {"name": name, "value": value, "target": goal, "met": None if value is None else met}


def targets(results: StepResults) -> list[dict[str, Any]]:
    """Each acceptance figure, its target and whether it was met (None: not measured, or a
    reference rather than a target)."""
    tsm = _rate(results, TSM, compiled=None)
    tsm_eager, tsn_eager = _rate(results, TSM, compiled=False), _rate(results, TSN, compiled=False)
    shards = results.shards
    out = [_target("TSM-R50 training clips/s (synthetic, best)", tsm, ">= 400", (tsm or 0) >= 400)]
    if shards is not None and tsm_eager:
        ratio = shards.clips_per_s / tsm_eager
        out.append(
            _target("TSM-R50 from shards / synthetic (eager)", ratio, ">= 0.90", ratio >= 0.9)
        )
    wait = None if shards is None else shards.data_wait_fraction
    out.append(_target("data wait from shards", wait, "<= 0.05", (wait or 0) <= 0.05))
    if shards is not None and tsm:
        cores = shards.cores_at(tsm)
        out.append(_target("CPU cores per GPU at the best synthetic rate", cores, "report", None))
    step_ratio = tsn_eager / tsm_eager if tsm_eager and tsn_eager else None
    out.append(
        _target("TSM/TSN step time (eager)", step_ratio, "<= 1.03", (step_ratio or 0) <= 1.03)
    )
    for model, paper in I3D_PAPER.items():
        i3d = _rate(results, model, compiled=False)
        vs_i3d = tsm_eager / i3d if tsm_eager and i3d else None
        out.append(
            _target(f"TSM vs {model} clips/s (eager)", vs_i3d, f"paper (P100): {paper}x", None)
        )
    slowfast = _rate(results, SLOWFAST, compiled=None)
    goal = 2 * SLOWFAST_RECORDED
    out.append(
        _target(
            "SlowFast-R50 8x8 training clips/s (best)",
            slowfast,
            f">= {goal:.1f}",
            (slowfast or 0) >= goal,
        )
    )
    return out


def _figure(value: float | None) -> str:
    if value is None:
        return "not measured"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "-"}[met]


def format_summary(report: GpuReport) -> str:
    """The markdown summary: environment, verdict, steps, tests, targets, throughput rows,
    data, profiles."""
    env = report.environment
    lines = [
        "# GPU acceptance run" + (" (dry run on the CPU)" if report.dry_run else ""),
        "",
        f"Device: {env.get('device_name')}; torch {env.get('torch')}, CUDA {env.get('cuda')}, "
        f"cuDNN {env.get('cudnn')}",
        "",
        "Result: " + ("**passed**" if report.passed else "**failed**"),
        *(f"- {p}" for p in report.problems),
        "",
        "| step | status | seconds | limit |",
        "|---|---|---:|---:|",
    ]
    for name, s in report.steps.items():
        lines.append(f"| {name} | {s['status']} | {s['seconds']:.0f} | {s['limit_s']:.0f} |")
    tests = report.tests
    if tests is not None:
        lines += [
            "",
            f"CUDA tests: {tests['passed']} passed, {tests['failed']} failed, "
            f"{tests['errors']} errors, {tests['skipped']} skipped of {tests['total']}",
        ]
    lines += ["", "| figure | value | target | verdict |", "|---|---:|---|---|"]
    for t in report.targets:
        lines.append(
            f"| {t['name']} | {_figure(t['value'])} | {t['target']} | {_verdict(t['met'])} |"
        )
    lines += _throughput_lines(report.results.throughput)
    lines += _profile_lines(report.results.profile)
    return "\n".join(lines) + "\n"


def _throughput_lines(throughput: ThroughputResult | None) -> list[str]:
    if throughput is None:
        return []
    peak = throughput.peak_flops_per_s
    lines = [
        "",
        f"Training throughput ({throughput.settings.setting}, peak matmul "
        f"{peak / 1e12:.1f} TFLOP/s measured in the run){_partial(throughput.complete)}:",
        "",
        "| model | variant | batch | step ms | clips/s | MFU |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in throughput.rows:
        lines.append(
            f"| {r.model} | {r.variant} | {r.batch} | {1e3 * r.step_s:.1f} | "
            f"{r.clips_per_s:.1f} | {r.mfu:.1%} |"
        )
    return lines


def _profile_lines(profile: ProfileResult | None) -> list[str]:
    if profile is None:
        return []
    lines = [
        "",
        *([f"Profiles{partial}:", ""] if (partial := _partial(profile.complete)) else []),
        "| profiled step | matmul/conv | memory-bound | idle | gaps | top by self time |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for m in profile.models:
        top = m.top[0].name[:60] if m.top else "-"
        lines.append(
            f"| {m.model} b{m.batch} | {m.matmul_conv_share:.0%} | "
            f"{m.memory_bound_share:.0%} | {m.idle_share:.0%} | {m.gaps} | `{top}` |"
        )
    return lines


def _partial(complete: bool) -> str:
    """A step's JSON is rewritten after each row; `complete` false means it stopped early."""
    return "" if complete else " (partial: the step stopped before its end)"


def environment(device: str) -> dict[str, Any]:
    """The device's name and the torch / CUDA / cuDNN versions the run used (cuDNN None
    without one): a wrong or slow bf16 3D convolution is the stack's, named by these."""
    import torch

    from vidscale.fastpath import hardware

    dev = hardware.resolve_device(device)
    return {
        "device": str(dev),
        "device_name": hardware.device_name(dev),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cores": hardware.describe(dev)["cores"],
    }


def run(
    config: GpuReportConfig,
    *,
    out_json: Path,
    progress: bool = False,
    device: str = "auto",
) -> GpuReport:
    """Collect `config.work` (the environment described on `device`), write the merged JSON
    to `out_json` atomically and the markdown summary to `config.out_md`; the merged report.
    `progress` names the files written on stderr."""
    report = collect(config.work, environment=environment(device), dry_run=config.dry_run)
    write_result(out_json, report.to_dict())
    atomic_write_text(config.out_md, format_summary(report))
    if progress:
        print(f"bench gpu-report: wrote {out_json}, {config.out_md}", file=sys.stderr)
    return report
