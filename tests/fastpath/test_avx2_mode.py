"""An AVX2-only CPU, emulated: the instruction-set caps that `.ci/run` runs the fast-path tests
under really make torch's kernels and vidscale's hardware detection act as on such a CPU.

`AVX2_ONLY` caps oneDNN (convolutions, and matrix products under autocast), ATen's own vector
kernels and MKL (float32 matrix products) at AVX2, whatever this machine has: no AVX-512 and no
bf16 units are used or reported. Each library says which code path it took in its verbose
lines (`ONEDNN_VERBOSE`, `MKL_VERBOSE`), which is what these tests read.

MKL dispatches by instruction set on Intel processors only: on any other CPU it takes its
generic branch ("Intel(R) Architecture processors" in its verbose line), never an AVX-512 one,
capped or not, so there its cap has nothing to change and the control shows it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

AVX2_ONLY = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}

REPORT = """
import json, torch
from vidscale.fastpath.hardware import describe
from vidscale.fastpath.settings import bf16_capped_by_environment, candidates
conv = torch.nn.Conv2d(8, 8, 3, padding=1)
conv(torch.randn(2, 8, 16, 16)).sum().backward()  # runs a oneDNN kernel, which reports its ISA
torch.randn(64, 64) @ torch.randn(64, 64)  # an fp32 SGEMM: MKL reports its code path
cpu = torch.device("cpu")
print(json.dumps({
    "aten": torch.backends.cpu.get_cpu_capability(),
    "bf16_units": describe(cpu)["bf16_units"],
    "capped_by": bf16_capped_by_environment(),
    "candidates": [c.label for c in candidates(cpu, bf16=None, channels_last=None)],
}))
"""


# MKL's first verbose line: "MKL_VERBOSE oneMKL 2024.0 ... for Intel(R) 64 architecture
# <the code path's processors>, Lnx 2.60GHz lp64 gnu_thread"
_MKL_PATH = re.compile(r"^MKL_VERBOSE .* architecture (?P<path>.+?), (Lnx|Win|OSX) ", re.M)
MKL_GENERIC = "Intel(R) Architecture processors"


def mkl_code_path(verbose: str) -> str:
    """The processors MKL's dispatched code path is for, from its verbose output."""
    found = _MKL_PATH.search(verbose)
    assert found is not None, f"no MKL_VERBOSE version line (is torch built with MKL?):\n{verbose}"
    return found.group("path")


def intel() -> bool:
    """An Intel CPU: the only kind on which MKL dispatches by instruction set."""
    return "GenuineIntel" in Path("/proc/cpuinfo").read_text()


def intel_with_avx512() -> bool:
    """An Intel CPU with AVX-512: where MKL, uncapped, dispatches its AVX-512 path."""
    return intel() and re.search(r"\bavx512f\b", Path("/proc/cpuinfo").read_text()) is not None


def report(env: dict[str, str]) -> tuple[dict[str, object], str]:
    """What a fresh process under `env` reports, and oneDNN's and MKL's verbose lines."""
    clean = {k: v for k, v in os.environ.items() if k not in AVX2_ONLY}
    out = subprocess.run(
        [sys.executable, "-c", REPORT],
        env={**clean, **env, "ONEDNN_VERBOSE": "1", "MKL_VERBOSE": "1"},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    lines = out.splitlines()
    return json.loads(lines[-1]), "\n".join(lines[:-1])


def test_the_caps_make_this_machine_act_as_an_avx2_only_cpu() -> None:
    seen, onednn = report(AVX2_ONLY)
    assert seen["aten"] == "AVX2"
    assert "isa:Intel AVX2" in onednn and "AVX-512" not in onednn, onednn
    assert seen["bf16_units"] is False and seen["capped_by"] == "ONEDNN_MAX_CPU_ISA=AVX2"
    assert seen["candidates"] == ["fp32", "fp32+cl"]  # bf16 would be emulated: not timed
    mkl = mkl_code_path(onednn)
    assert "AVX-512" not in mkl, mkl
    assert ("(Intel(R) AVX2)" in mkl) if intel() else (mkl == MKL_GENERIC), mkl


def test_without_the_caps_the_host_reports_itself() -> None:
    """The control: whatever this machine is, uncapped it reports its own ISA (AVX2 here only on
    a CPU that has no more)."""
    seen, onednn = report({})
    assert seen["capped_by"] is None
    isa = next(line for line in onednn.splitlines() if "isa:" in line)
    assert ("AVX-512" in isa or "AMX" in isa) == (seen["aten"] in ("AVX512", "AVX512_BF16"))
    # MKL's cap matters only where MKL would take AVX-512 uncapped: an Intel CPU that has it
    mkl = mkl_code_path(onednn)
    assert ("AVX-512" in mkl) == intel_with_avx512(), mkl
    assert intel() or mkl == MKL_GENERIC, mkl
