"""The GPU acceptance run's report: every step's JSON merged into one, and a markdown summary
that sets each figure beside its target.

`scripts/gpu_checks.sh` leaves in its work directory: `steps.tsv` (step, exit status, seconds,
time limit), `tests.xml` (pytest's JUnit report of the CUDA tests), `throughput.json`
(`bench throughput`), `shards.json` (`bench shard-train`) and `profile.json` (`bench profile`).
A run passes when every step exited 0 and no CUDA test failed or was skipped (a dry run on the
CPU expects them all skipped, with a reason); a target missed is a finding, not a failure.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from vidscale.bench.data.shard_train import cores_at

STEPS = ("setup", "tests", "throughput", "shards", "profile")
STEP_FILES = {"throughput": "throughput.json", "shards": "shards.json", "profile": "profile.json"}
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


def collect(work: Path, *, environment: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    """Everything the run left in `work`, its targets and whether it passed."""
    results: dict[str, Any] = {"environment": environment, "dry_run": dry_run}
    results["steps"] = read_steps(work / "steps.tsv")
    results["tests"] = read_tests(work / "tests.xml")
    for step, name in STEP_FILES.items():
        path = work / name
        results[step] = json.loads(path.read_text()) if path.is_file() else None
    results["targets"] = targets(results)
    results["problems"] = problems(results)
    results["passed"] = not results["problems"]
    return results


def problems(results: dict[str, Any]) -> list[str]:
    """Why the run fails, one line each: a step missing, failed or timed out, a CUDA test
    failed or skipped (on the CPU: one not skipped, or skipped without a reason)."""
    found = []
    for step in STEPS:
        status = results["steps"].get(step, {}).get("status", "missing")
        if status != "ok":
            found.append(f"step {step}: {status}")
    tests = results["tests"]
    if tests is None or tests["total"] == 0:
        found.append("no CUDA tests ran (tests.xml missing or empty)")
        return found
    if tests["failed"] or tests["errors"]:
        found.append(f"CUDA tests: {tests['failed']} failed, {tests['errors']} errors")
    if results["dry_run"]:
        if tests["skipped"] != tests["total"]:
            found.append("dry run: a CUDA test ran on the CPU instead of skipping")
        if any(not s["reason"] for s in tests["skipped_tests"]):
            found.append("dry run: a CUDA test skipped without a reason")
    elif tests["skipped"]:
        names = ", ".join(s["test"] for s in tests["skipped_tests"])
        found.append(f"CUDA tests skipped: {names}")
    return found


def _rate(results: dict[str, Any], model: str, *, compiled: bool | None) -> float | None:
    """clips/s of `model`: its eager or compiled row, or (None) the better of the two."""
    rows = (results.get("throughput") or {}).get("rows", [])
    rates = [
        r["clips_per_s"]
        for r in rows
        if r["model"] == model and (compiled is None or r["compiled"] == compiled)
    ]
    return max(rates) if rates else None


def _target(name: str, value: float | None, goal: str, met: bool | None) -> dict[str, Any]:
    return {"name": name, "value": value, "target": goal, "met": None if value is None else met}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each acceptance figure, its target and whether it was met (None: not measured, or a
    reference rather than a target)."""
    tsm = _rate(results, TSM, compiled=None)
    tsm_eager, tsn_eager = _rate(results, TSM, compiled=False), _rate(results, TSN, compiled=False)
    shards = results.get("shards")
    out = [_target("TSM-R50 training clips/s (synthetic, best)", tsm, ">= 400", (tsm or 0) >= 400)]
    if shards is not None and tsm_eager:
        ratio = shards["clips_per_s"] / tsm_eager
        out.append(
            _target("TSM-R50 from shards / synthetic (eager)", ratio, ">= 0.90", ratio >= 0.9)
        )
    wait = None if shards is None else shards["data_wait_fraction"]
    out.append(_target("data wait from shards", wait, "<= 0.05", (wait or 0) <= 0.05))
    if shards is not None and tsm:
        out.append(
            _target(
                "CPU cores per GPU at the best synthetic rate",
                cores_at(shards, tsm),
                "report",
                None,
            )
        )
    step_ratio = tsn_eager / tsm_eager if tsm_eager and tsn_eager else None
    out.append(
        _target("TSM/TSN step time (eager)", step_ratio, "<= 1.03", (step_ratio or 0) <= 1.03)
    )
    for model, paper in I3D_PAPER.items():
        i3d = _rate(results, model, compiled=False)
        ratio = tsm_eager / i3d if tsm_eager and i3d else None
        out.append(
            _target(f"TSM vs {model} clips/s (eager)", ratio, f"paper (P100): {paper}x", None)
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


def format_summary(results: dict[str, Any]) -> str:
    """The markdown summary: environment, verdict, steps, tests, targets, throughput rows,
    data, profiles."""
    env = results["environment"]
    lines = [
        "# GPU acceptance run" + (" (dry run on the CPU)" if results["dry_run"] else ""),
        "",
        f"Device: {env.get('device_name')}; torch {env.get('torch')}, CUDA {env.get('cuda')}",
        "",
        "Result: " + ("**passed**" if results["passed"] else "**failed**"),
        *(f"- {p}" for p in results["problems"]),
        "",
        "| step | status | seconds | limit |",
        "|---|---|---:|---:|",
    ]
    for name, s in results["steps"].items():
        lines.append(f"| {name} | {s['status']} | {s['seconds']:.0f} | {s['limit_s']:.0f} |")
    tests = results["tests"]
    if tests is not None:
        lines += [
            "",
            f"CUDA tests: {tests['passed']} passed, {tests['failed']} failed, "
            f"{tests['errors']} errors, {tests['skipped']} skipped of {tests['total']}",
        ]
    lines += ["", "| figure | value | target | verdict |", "|---|---:|---|---|"]
    for t in results["targets"]:
        lines.append(
            f"| {t['name']} | {_figure(t['value'])} | {t['target']} | {_verdict(t['met'])} |"
        )
    lines += _throughput_lines(results.get("throughput"))
    lines += _profile_lines(results.get("profile"))
    return "\n".join(lines) + "\n"


def _throughput_lines(throughput: dict[str, Any] | None) -> list[str]:
    if throughput is None:
        return []
    peak = throughput["peak_flops_per_s"]
    lines = [
        "",
        f"Training throughput ({throughput['settings']['setting']}, peak matmul "
        f"{peak / 1e12:.1f} TFLOP/s measured in the run){_partial(throughput)}:",
        "",
        "| model | variant | batch | step ms | clips/s | MFU |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in throughput["rows"]:
        variant = "compiled" if r["compiled"] else "eager"
        lines.append(
            f"| {r['model']} | {variant} | {r['batch']} | {1e3 * r['step_s']:.1f} | "
            f"{r['clips_per_s']:.1f} | {r['mfu']:.1%} |"
        )
    return lines


def _profile_lines(profile: dict[str, Any] | None) -> list[str]:
    if profile is None:
        return []
    lines = [
        "",
        *([f"Profiles{partial}:", ""] if (partial := _partial(profile)) else []),
        "| profiled step | matmul/conv | memory-bound | idle | gaps | top by self time |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for m in profile["models"]:
        top = m["top"][0]["name"][:60] if m["top"] else "-"
        lines.append(
            f"| {m['model']} b{m['batch']} | {m['matmul_conv_share']:.0%} | "
            f"{m['memory_bound_share']:.0%} | {m['idle_share']:.0%} | {m['gaps']} | `{top}` |"
        )
    return lines


def _partial(result: dict[str, Any]) -> str:
    """A step's JSON is rewritten after each row; `complete` false means it stopped early."""
    return "" if result.get("complete", True) else " (partial: the step stopped before its end)"


def environment(device: str) -> dict[str, Any]:
    """The device's name and the torch / CUDA versions the run used."""
    import torch

    from vidscale.fastpath import hardware

    dev = hardware.resolve_device(device)
    return {
        "device": str(dev),
        "device_name": hardware.device_name(dev),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cores": hardware.describe(dev)["cores"],
    }


def write_report(
    work: Path, *, out_json: Path, out_md: Path, device: str, dry_run: bool
) -> dict[str, Any]:
    """Collect `work`, write the merged JSON and the markdown summary; the merged results."""
    results = collect(work, environment=environment(device), dry_run=dry_run)
    out_json.write_text(json.dumps(results, indent=2) + "\n")
    out_md.write_text(format_summary(results))
    return results
