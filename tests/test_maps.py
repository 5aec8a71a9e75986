"""The maps of the code cannot drift from it (docs/design.md, "Layout and dependency rule").

Three maps name the code: each package's `__init__` docstring names its modules and
subpackages, docs/design.md's layout block names every package (and the top-level modules, the
root package's own map), and the README's "Code map" names every package. A module added without
its line in a map fails here, naming the module and the map that lacks it.

How a map names something: a package docstring names a module or subpackage in backticks as the
first part of the span (`name`, `name/`, `name.Thing`, `name(...)`); the two documents name a
package as `name/`, and a subpackage inside the text of its top-level package (from that
package's first mention to the next top-level package's), since `data/` is both a package and a
subpackage of `bench/`; design.md names a top-level module as `name.py`.

The tests mirror the packages below the top level: every folder of tests inside a package's
tests (`tests/train/records/`) is the subpackage of the same path (`vidscale/train/records/`),
and every subpackage has its folder of tests, so a moved or added subpackage moves its tests.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "vidscale"
DESIGN = REPO / "docs" / "design.md"
README = REPO / "README.md"
TESTS = REPO / "tests"

_SPAN = re.compile(r"`([^`\n]+)`")
_FIRST_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def docstring_names(docstring: str) -> set[str]:
    """The first identifier of every backticked span: what a package docstring names."""
    names = set()
    for span in _SPAN.findall(docstring):
        first = _FIRST_PART.match(span.strip())
        if first is not None:
            names.add(first.group())
    return names


def parts_of(package: Path) -> list[str]:
    """A package's modules (`__init__` aside) and subpackages, by name."""
    modules = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
    subpackages = [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + subpackages)


def packages_under(root: Path) -> list[Path]:
    """Every package under `root`, `root` itself first."""
    return sorted(p.parent for p in root.rglob("__init__.py") if "__pycache__" not in p.parts)


def unnamed_in_package_maps(root: Path) -> list[str]:
    """`module: map` for every module or subpackage that its package's docstring does not name.

    The root package is left out: its map is design.md's layout block
    (`unnamed_in_document`)."""
    missing = []
    for package in packages_under(root):
        if package == root:
            continue
        init = package / "__init__.py"
        named = docstring_names(ast.get_docstring(ast.parse(init.read_text())) or "")
        for part in parts_of(package):
            if part not in named:
                where = (package / part).relative_to(root.parent).as_posix()
                map_file = init.relative_to(root.parent).as_posix()
                missing.append(f"{where}: not named in the docstring of {map_file}")
    return missing


def _mention(name: str) -> re.Pattern[str]:
    # `name/` not preceded by a path or a word: `bench/` yes, `vidscale/bench/` or `xbench/` no
    return re.compile(rf"(?<![\w/.-]){re.escape(name)}/")


def scopes(text: str, tops: Iterable[str]) -> dict[str, str]:
    """Each top-level package's text: from its first mention to the next top-level package's
    first mention (the end of `text` for the last; empty for one never mentioned)."""
    starts = {}
    for top in tops:
        found = _mention(top).search(text)
        if found is not None:
            starts[top] = found.start()
    order = sorted(starts, key=starts.__getitem__)
    ends = {a: starts[b] for a, b in pairwise(order)}
    return {
        top: text[starts[top] : ends.get(top, len(text))] if top in starts else "" for top in tops
    }


def unnamed_in_document(root: Path, text: str, *, where: str, modules: bool) -> list[str]:
    """`package: where` for every package of `root` that `text` does not name (a subpackage
    inside its top-level package's text); with `modules`, the top-level modules too (`name.py`).
    """
    tops = [p.name for p in packages_under(root) if p.parent == root]
    text_of = scopes(text, tops)
    missing = []
    for package in packages_under(root):
        rel = package.relative_to(root).parts
        if not rel:
            continue
        if not _mention(package.name).search(text_of[rel[0]]):
            missing.append(f"{root.name}/{'/'.join(rel)}/: not named in {where}")
    if modules:
        for path in sorted(root.glob("*.py")):
            if path.name != "__init__.py" and not re.search(
                rf"(?<![\w/.]){re.escape(path.name)}\b", text
            ):
                missing.append(f"{root.name}/{path.name}: not named in {where}")
    return missing


def design_layout() -> str:
    """The fenced block under design.md's "Layout and dependency rule"."""
    section = DESIGN.read_text().split("## Layout and dependency rule", 1)[1]
    return section.split("```", 2)[1]


def readme_code_map() -> str:
    """The README's "Code map" section."""
    section = README.read_text().split("## Code map", 1)[1]
    return section.split("\n## ", 1)[0]


def below_the_top(root: Path, keep: Callable[[Path], bool]) -> set[tuple[str, ...]]:
    """The relative paths of the folders two or more levels below `root` that `keep` accepts."""
    found = set()
    for folder in root.rglob("*"):
        parts = folder.relative_to(root).parts
        if len(parts) >= 2 and folder.is_dir() and keep(folder):
            found.add(parts)
    return found


def unmirrored(package: Path, tests: Path) -> list[str]:
    """`folder: what it lacks` for every folder of tests below a package's (`tests/<pkg>/<sub>/`,
    one holding Python) that is no subpackage at the same path under `package`, and for every
    such subpackage without its folder of tests. The top level is left out: `tests/cluster/`
    tests the SLURM scripts, which are no package."""
    folders = below_the_top(tests, lambda folder: any(folder.glob("*.py")))
    subpackages = below_the_top(package, lambda folder: (folder / "__init__.py").is_file())
    missing = [
        f"{tests.name}/{'/'.join(p)}/: no package {package.name}/{'/'.join(p)}/"
        for p in sorted(folders - subpackages)
    ]
    missing += [
        f"{package.name}/{'/'.join(p)}/: no folder of tests {tests.name}/{'/'.join(p)}/"
        for p in sorted(subpackages - folders)
    ]
    return missing


# -- the maps ------------------------------------------------------------------------------------


def test_every_package_map_names_its_modules() -> None:
    missing = unnamed_in_package_maps(PACKAGE)
    assert missing == [], "\n".join(missing)


def test_the_design_layout_names_every_package_and_top_level_module() -> None:
    missing = unnamed_in_document(
        PACKAGE, design_layout(), where="docs/design.md (layout block)", modules=True
    )
    assert missing == [], "\n".join(missing)


def test_the_readme_code_map_names_every_package() -> None:
    missing = unnamed_in_document(
        PACKAGE, readme_code_map(), where="README.md (Code map)", modules=False
    )
    assert missing == [], "\n".join(missing)


def test_the_tests_mirror_the_subpackages() -> None:
    missing = unmirrored(PACKAGE, TESTS)
    assert missing == [], "\n".join(missing)


# -- the guard itself ----------------------------------------------------------------------------


def _package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for rel, text in files.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return package


def test_the_guard_sees_an_unnamed_module_and_an_unnamed_subpackage(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a/__init__.py": '"""`x` does one thing; y is named in prose only; `b/` too."""\n',
            "a/x.py": "",
            "a/y.py": "",
            "a/b/__init__.py": '"""Nothing here."""\n',
            "a/b/z.py": "",
            "c/__init__.py": '"""`w.Thing`, `v(...)`."""\n',
            "c/w.py": "",
            "c/v.py": "",
        },
    )
    assert unnamed_in_package_maps(package) == [
        "pkg/a/y: not named in the docstring of pkg/a/__init__.py",
        "pkg/a/b/z: not named in the docstring of pkg/a/b/__init__.py",
    ]


def test_the_guard_sees_a_subpackage_named_only_under_another_package(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "top.py": "",
            "data/__init__.py": "",
            "data/media/__init__.py": "",
            "bench/__init__.py": "",
            "bench/data/__init__.py": "",
            "bench/speed/__init__.py": "",
        },
    )
    # media/ is mentioned, but under bench/: it does not name data/media
    text = "`data/` (clips); `bench/` (by subject: `data/`, `speed/`, `media/`); top.py"
    assert unnamed_in_document(package, text, where="the map", modules=True) == [
        "pkg/data/media/: not named in the map"
    ]
    assert unnamed_in_document(package, "`data/` `bench/`", where="m", modules=True) == [
        "pkg/bench/data/: not named in m",
        "pkg/bench/speed/: not named in m",
        "pkg/data/media/: not named in m",
        "pkg/top.py: not named in m",
    ]


def test_the_guard_sees_tests_and_subpackages_that_do_not_mirror(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a/__init__.py": "",
            "a/b/__init__.py": "",
            "a/c/__init__.py": "",
            "e/__init__.py": "",
        },
    )
    tests = tmp_path / "tests"
    for rel in (
        "a/test_x.py",
        "a/b/test_y.py",
        "a/d/test_z.py",
        "a/snapshots/x.txt",
        "f/test_f.py",
    ):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    # a/snapshots/ holds no Python: not a folder of tests; f/ is at the top: not checked
    assert unmirrored(package, tests) == [
        "tests/a/d/: no package pkg/a/d/",
        "pkg/a/c/: no folder of tests tests/a/c/",
    ]
