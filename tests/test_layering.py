"""Design guards: the import graph of vidscale/ and the size limits (docs/design.md, "Layout
and dependency rule").

The graph is read from the source (every `import` statement, at module level, inside functions
and under `TYPE_CHECKING` alike), so an import hidden in a function counts as much as one at the
top of a file.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vidscale"
ROOT_NAME = "vidscale"

# The layer order, bottom to top: a module may import its own layer and the layers below it.
# A layer is a list of subjects (the first part of a module's name under vidscale/). config and
# recipes sit above data and distributed because the run's description composes each
# component's config (ClipSpec, DistConfig, CommConfig, AAVGConfig, ...), which lives beside its
# component; nothing below them imports them. "" is the package's own __init__.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "atomic", "errors", "models", "optim", "schedules"),  # the ground floor: pure parts
    ("data", "distributed", "netlab"),  # clips in, processes together, a network to test them
    ("config", "recipes"),  # a run's description, composed of the components' configs
    ("step",),  # one optimizer step: what training, the probe and the benches run
    ("fastpath",),  # choosing the arithmetic by measurement
    ("run", "scoring"),  # a run on disk and what reads it; how a model's scores are computed
    ("train", "predict", "predict_window", "export", "weights", "features"),  # uses of a run
    ("bench", "planner"),  # measuring this device; the analytic model and the planner
    ("studies",),  # runs that launch runs
    ("cli", "__main__"),  # the command
)
GROUND_FLOOR = LAYERS[0]

# Known offenders, each being split on another branch right now; empty this list once those
# splits are merged. A file named here may exceed the line limit, nothing else.
# Files allowed over the limit while a split is under way (none now).
LONG_FILES_ALLOWED: frozenset[str] = frozenset()
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60

# What a command-line argument parser calls: a function in cli/ named `add_parsers` or
# `_add_*` whose every statement is one of these calls may be as long as its flags need.
_ARGPARSE_CALLS = frozenset(
    {
        "add_parser",
        "add_subparsers",
        "add_argument",
        "add_argument_group",
        "add_mutually_exclusive_group",
        "set_defaults",
    }
)


# -- the graph -----------------------------------------------------------------------------------


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """`vidscale/bench/compute/models.py` -> `vidscale.bench.compute.models`; a package's __init__ is the
    package."""
    parts = (package.name, *path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.AST, module: str, *, is_package: bool) -> Iterator[str]:
    """Every name an import statement anywhere in `tree` brings in, absolute: `from a import
    b` yields `a.b` (a module or a name in `a`, told apart by the caller)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: count packages up from this module's own package
                here = module.split(".") if is_package else module.split(".")[:-1]
                anchor = here[: len(here) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (itself excluded)."""
    files = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str] = set()
        for name in imported_names(tree, module, is_package=path.name == "__init__.py"):
            # `from a.b import c`: the module a.b.c if there is one, else a.b (c is a name in it)
            while name not in files and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in files and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


@cache
def package_graph() -> Mapping[str, frozenset[str]]:
    return {m: frozenset(t) for m, t in import_graph().items()}


def subject(module: str) -> str:
    """The first part under the package: `vidscale.bench.compute.models` -> `bench`, `vidscale` -> ""."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(module: str) -> int:
    name = subject(module)
    for level, layer in enumerate(LAYERS):
        if name in layer:
            return level
    raise AssertionError(f"{module}: subject {name!r} is in no layer of LAYERS; add it there")


def find_cycle(graph: Mapping[str, frozenset[str] | set[str]]) -> list[str] | None:
    """One import cycle as a path `[a, b, ..., a]`, or None when the graph has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path: list[str] = [start]
        stack: list[Iterator[str]] = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def imports_of(subjects: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    """(importer, imported) for every edge out of a module of `subjects`."""
    for module, targets in sorted(package_graph().items()):
        if subject(module) in subjects:
            yield from ((module, t) for t in sorted(targets))


# -- the graph's rules ---------------------------------------------------------------------------


def test_no_import_cycle() -> None:
    cycle = find_cycle(package_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_module_is_in_a_layer() -> None:
    for module in package_graph():
        layer_of(module)


def test_no_upward_import() -> None:
    upward = [
        f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
        for a, targets in sorted(package_graph().items())
        for b in sorted(targets)
        if layer_of(b) > layer_of(a)
    ]
    assert upward == [], "upward imports:\n" + "\n".join(upward)


def test_ground_floor_imports_nothing_above_it() -> None:
    above = [f"{a} imports {b}" for a, b in imports_of(GROUND_FLOOR) if layer_of(b) > 0]
    assert above == [], "the ground floor imports from above:\n" + "\n".join(above)


def test_train_never_imports_bench_studies_or_planner() -> None:
    wrong = [
        f"{a} imports {b}"
        for a, b in imports_of(("train",))
        if subject(b) in ("bench", "studies", "planner")
    ]
    assert wrong == [], "\n".join(wrong)


# What launches or evaluates a run as the trainer does: the only modules outside train/ and
# cli/ that import the trainer's package.
TRAINER_USERS = {
    "vidscale.studies.runs": {"vidscale.train.loop"},  # a study trains its runs
    # and fuses two of them
    "vidscale.studies.two_stream": {"vidscale.train.evaluation.two_stream_eval"},
    # benches that measure what the trainer would run: its fast-path decision, its loaders
    "vidscale.bench.data.data_wait": {"vidscale.train.builders"},
    "vidscale.bench.multigrid": {"vidscale.train.builders"},
    "vidscale.bench.scaling.data": {"vidscale.train.builders"},
}


def test_a_run_on_disk_is_read_without_the_trainer() -> None:
    """predict, export, the weights importers, feature extraction, the studies and the benches
    read a run through `run/` and `scoring/`; only launching or evaluating a run as the
    trainer does, or measuring what it would run, imports `train/` (`TRAINER_USERS`)."""
    wrong = [
        f"{a} imports {b}"
        for a, targets in sorted(package_graph().items())
        for b in sorted(targets)
        if subject(b) == "train"
        and subject(a) not in ("train", "cli")
        and b not in TRAINER_USERS.get(a, set())
    ]
    assert wrong == [], "\n".join(wrong)


def test_only_cli_imports_studies() -> None:
    wrong = [
        f"{a} imports {b}"
        for a, targets in sorted(package_graph().items())
        for b in sorted(targets)
        if subject(b) == "studies" and subject(a) not in ("studies", "cli")
    ]
    assert wrong == [], "\n".join(wrong)


_TORCH_DISTRIBUTED = re.compile(
    r"^\s*(import torch\.distributed|from torch\.distributed|from torch import distributed)", re.M
)


def test_torch_distributed_only_in_distributed_package() -> None:
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "distributed" not in p.relative_to(PACKAGE).parts[:1]
        and _TORCH_DISTRIBUTED.search(p.read_text())
    ]
    assert offenders == []


def test_models_know_nothing_of_data_or_distribution() -> None:
    for p in (PACKAGE / "models").rglob("*.py"):
        text = p.read_text()
        assert "vidscale.data" not in text and "vidscale.distributed" not in text, p


# Inside data/ and bench/, by subpackage: what each may import of its own package besides itself
# (module names under the package; a subpackage's modules count as the subpackage).
INSIDE_RULES: dict[str, dict[str, frozenset[str]]] = {
    "data": {
        "media": frozenset(),  # codecs know nothing of layouts, shards or the pipeline
        "layouts": frozenset({"annotations", "label_sets"}),
    },
    "bench": {  # `options`: the settings' fields with their flags, beside `results`
        "compute": frozenset({"results", "options"}),
        "data": frozenset({"results", "options", "compute"}),
        "scaling": frozenset({"results", "options", "compute"}),
    },
}
LEAVES = {"data": "synthetic", "bench": "gpu_report"}  # nothing else in the package imports them


def part_of(module: str, package: str) -> str | None:
    """`vidscale.data.media.decode` -> `media` (for package "data"); None outside it."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == package else None


def inside_violations(package: str) -> list[str]:
    found = []
    for module, targets in package_graph().items():
        mine = part_of(module, package)
        if mine is None:
            continue
        for target in targets:
            theirs = part_of(target, package)
            if theirs is None or theirs == mine:
                continue
            allowed = INSIDE_RULES[package].get(mine)
            if allowed is not None and theirs not in allowed:
                found.append(f"{module} -> {target}")
            if theirs == LEAVES[package]:
                found.append(f"{module} -> {target} ({theirs} is a leaf)")
    return found


@pytest.mark.parametrize("package", sorted(INSIDE_RULES))
def test_subpackages_import_only_what_their_subject_needs(package: str) -> None:
    assert inside_violations(package) == []


def test_the_inside_rules_see_a_codec_importing_the_shard_format(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = dict(package_graph())
    graph["vidscale.data.media.decode"] |= {"vidscale.data.prepared.shards"}
    graph["vidscale.data.sources"] |= {"vidscale.data.synthetic.videos"}
    monkeypatch.setitem(globals(), "package_graph", lambda: graph)
    assert inside_violations("data") == [
        "vidscale.data.media.decode -> vidscale.data.prepared.shards",
        "vidscale.data.sources -> vidscale.data.synthetic.videos (synthetic is a leaf)",
    ]


def backward_calls(package: Path = PACKAGE) -> list[str]:
    """`file:line` of every `.backward(...)` call in the package."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "backward"
            ):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    return found


def test_the_training_step_exists_once() -> None:
    """Training, the fast-path probe and every bench run `step.run.train_step` (or its
    `forward_backward`): a backward pass anywhere else is a private copy of the step, which can
    differ from the trainer's (loss outside the autocast, no update) and measure a step the
    trainer never runs."""
    outside = [c for c in backward_calls() if not c.startswith("step/")]
    assert outside == [], f"backward() outside vidscale/step/: {outside}"
    assert backward_calls(), "the guard must see the step's own backward()"


# -- sizes ---------------------------------------------------------------------------------------


def test_no_file_over_the_line_limit() -> None:
    long = [
        f"{rel}: {n} lines"
        for p in sorted(PACKAGE.rglob("*.py"))
        if (rel := p.relative_to(PACKAGE).as_posix()) not in LONG_FILES_ALLOWED
        and (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    ]
    assert long == [], f"files over {MAX_FILE_LINES} lines:\n" + "\n".join(long)


def test_the_long_file_allowlist_names_only_long_files() -> None:
    # An entry whose file was split (or removed) must leave the list, so it cannot hide a new one.
    stale = [
        rel
        for rel in sorted(LONG_FILES_ALLOWED)
        if not (PACKAGE / rel).exists()
        or len((PACKAGE / rel).read_text().splitlines()) <= MAX_FILE_LINES
    ]
    assert stale == [], (
        f"no longer over {MAX_FILE_LINES} lines, drop from LONG_FILES_ALLOWED: {stale}"
    )


def _is_parser_builder(node: ast.FunctionDef | ast.AsyncFunctionDef, rel: str) -> bool:
    """A cli/ function named `add_parsers` or `_add_*` that only builds argparse parsers: each
    statement (after a docstring) calls an argparse builder method or another parser builder
    (`_add_*`, or a shared flag helper `add_*` such as `add_json_flag`)."""
    if not rel.startswith("cli/") or not (
        node.name == "add_parsers" or node.name.startswith("_add_")
    ):
        return False
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    for stmt in body:
        value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
        if not isinstance(value, ast.Call):
            return False
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in _ARGPARSE_CALLS:
            continue
        if isinstance(func, ast.Name) and func.id.startswith(("_add_", "add_")):
            continue
        return False
    return True


def long_functions(package: Path = PACKAGE) -> list[str]:
    """`file:function (n lines)` for every function over the limit that is not an argument
    parser."""
    out = []
    for p in sorted(package.rglob("*.py")):
        rel = p.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES and not _is_parser_builder(node, rel):
                out.append(f"{rel}:{node.name} ({lines} lines)")
    return out


def test_no_function_over_the_line_limit() -> None:
    long = long_functions()
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


# -- the guards themselves -----------------------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for rel, text in files.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return package


def test_the_graph_sees_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "a/__init__.py": "",
            "a/x.py": "def f():\n    from pkg.b.y import g\n    return g\n",
            "b/__init__.py": "",
            "b/y.py": "from ..a import x\nfrom . import z\ndef g(): ...\n",
            "b/z.py": "",
        },
    )
    graph = import_graph(package)
    assert graph["pkg.a.x"] == {"pkg.b.y"}
    assert graph["pkg.b.y"] == {"pkg.a.x", "pkg.b.z"}
    assert find_cycle(graph) in (
        ["pkg.a.x", "pkg.b.y", "pkg.a.x"],
        ["pkg.b.y", "pkg.a.x", "pkg.b.y"],
    )
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize(
    ("rel", "body", "counted"),
    [
        ("cli/x.py", "    p.add_argument('--a')\n", False),
        ("cli/x.py", "    p.add_argument('--a')\n    print(p)\n", True),
        ("bench/x.py", "    p.add_argument('--a')\n", True),
    ],
)
def test_only_argument_parsers_may_be_long(
    tmp_path: Path, rel: str, body: str, counted: bool
) -> None:
    source = "def _add_flags(p):\n" + body * MAX_FUNCTION_LINES
    package = _write(tmp_path, {rel: source})
    assert bool(long_functions(package)) is counted


def test_the_trainer_class_stays_small() -> None:
    """The Trainer keeps the epoch loop, evaluation and batch adaptation; what a feature adds
    belongs in its collaborators (checkpointer, run log, step), not in this class."""
    tree = ast.parse((PACKAGE / "train" / "loop.py").read_text())
    trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    lines = trainer.end_lineno - trainer.lineno + 1  # type: ignore[operator]
    assert lines <= 250, f"Trainer is {lines} lines; move a job into a collaborator"
    module = len((PACKAGE / "train" / "loop.py").read_text().splitlines())
    assert module <= 350, f"train/loop.py is {module} lines; move a job into a collaborator"
