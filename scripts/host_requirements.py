"""Print, one per line, the project's requirements that this Python does not satisfy.

    python scripts/host_requirements.py [PYPROJECT] [--extra dev | --build] [--all] [--only NAME ...]

Used by scripts/setup.sh on a host that keeps its own torch (a CUDA image, say): only what the
host lacks is installed, so pip never resolves, replaces or downloads torch, and an offline host
needs wheels only for the few packages its image does not hold. torch itself is never printed.
`--build` reads `[build-system] requires` instead: setup builds the project without build
isolation, which offline could not fetch a backend, so an old setuptools must be replaced
first. `--all` prints the declared requirements whether satisfied or not (scripts/gpu_wheels.sh reads
their version ranges); `--only` keeps the named ones. Runs before vidscale is installed, so it
needs nothing but the standard library and pip.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

try:
    from packaging.requirements import Requirement
except ModuleNotFoundError:  # a bare venv: pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement


def canonical(name: str) -> str:
    """PEP 503's normalised name: `opencv_contrib_python_headless` is `opencv-contrib-python-headless`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path, extras: list[str], *, build: bool = False) -> list[Requirement]:
    """The `[project] dependencies` plus each named optional-dependency list (with `build`,
    the `[build-system] requires` alone), torch left out."""
    document = tomllib.loads(pyproject.read_text())
    project = document["project"]
    declared = list(document["build-system"]["requires"] if build else project["dependencies"])
    for extra in extras:
        declared += project["optional-dependencies"][extra]
    parsed = [Requirement(text) for text in declared]
    return [r for r in parsed if canonical(r.name) != "torch"]


def unsatisfied(reqs: list[Requirement]) -> list[Requirement]:
    """Those not installed at a version inside their range (markers that do not apply skipped)."""
    missing = []
    for req in reqs:
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(req)
            continue
        if not req.specifier.contains(installed, prereleases=True):
            missing.append(req)
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", nargs="?", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--extra", action="append", default=[], help="optional-dependency list")
    parser.add_argument("--build", action="store_true", help="the build-system's requirements")
    parser.add_argument("--all", action="store_true", help="satisfied requirements too")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="these alone")
    args = parser.parse_args(argv)
    if args.build and args.extra:
        parser.error("--build reads the build-system's requirements; --extra does not apply")
    reqs = requirements(args.pyproject, args.extra, build=args.build)
    if args.only:
        wanted = {canonical(name) for name in args.only}
        unknown = wanted - {canonical(r.name) for r in reqs}
        if unknown:
            parser.error(f"not a declared requirement: {', '.join(sorted(unknown))}")
        reqs = [r for r in reqs if canonical(r.name) in wanted]
    for req in reqs if args.all else unsatisfied(reqs):
        print(f"{req.name}{req.specifier}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
