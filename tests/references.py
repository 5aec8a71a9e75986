"""Find the references in docstrings, comments and docs that point at nothing.

Read by tests/test_references.py. Checked in the docstrings and comments of the Python of
vidscale/, tests/ and scripts/ (not in string literals of code), and in the markdown of docs/
and README.md:

- paths: under a top-level entry (`docs/guide.md`, `tests/train/`); a bare markdown name
  (`guide.md`: at the top, in docs/ or beside the file); a bare test file or retired module
  (`test_rule.py`: anywhere in vidscale/, tests/ or scripts/); relative to a directory of the
  repository (`media/decode.py`, `layouts/`) when ending in a known extension or `/`, tried
  under vidscale/, each directory above the file (and above a test's mirror in vidscale/) and
  every directory of that first name. Placeholders (`*`, `<x>`, `{x}`, `$X`, `NNNN`, all-caps
  parts such as `RUN/`), URLs, `../shared/` and paths whose first directory is none of the
  repository's (another project's, a dataset's, a run's outputs) are not checked;
- doc sections: `docs/design.md, "Multi-label data"` and `guide.md#benchmarks` name a heading
  (or a list item's bold lead-in); markdown links `[text](target#anchor)`, relative to the
  markdown file, the anchor a heading of the target as GitHub spells it;
- symbols: a backticked dotted name (the part before any `(`) whose first part is `vidscale`,
  a top-level package or module (`train.loop.Trainer`) or the last part of a module inside
  (`probe.decide`), imported and looked up attribute by attribute. Run-config keys
  (`train.amp`) and file names (`train.csv`) are not symbols; nor is a name starting with one
  the file binds (a parameter: unless a module's name follows), nor "Other's `x.y`". A name
  starting with a module that no longer exists (RETIRED_MODULES) is stale.

Paths resolve under the `root` given; symbols against the installed `vidscale` package.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vidscale"
TOP_LEVEL = ("vidscale", "tests", "scripts", "docs", ".ci")
PATH_EXTENSIONS = frozenset({".py", ".md", ".sh", ".json", ".txt", ".toml", ".sbatch", ".yaml"})
# The last part of a backticked dotted name that makes it a file name, not a symbol.
FILE_SUFFIXES = frozenset(
    {"py", "md", "sh", "json", "jsonl", "csv", "txt", "toml", "yaml", "sbatch", "pt", "pth"}
    | {"png", "mat", "log", "npy", "npz", "onnx", "mp4", "webm", "jpg", "jpeg", "avi", "tar"}
    | {"gz", "zip", "html", "lst", "bin", "mkv"}
)
# Modules that were renamed or moved into packages and whose name no module has now: a dotted
# name starting with one is stale. Each maps to where it was.
RETIRED_MODULES: dict[str, str] = {
    name: f"vidscale/{where}/{name}.py"
    for where, names in {
        "train": "fast_path fast_path_cache fast_path_isolation fast_path_probe fast_path_rule "
        "fast_path_timing aavg_study multigrid_study two_stream_study losses",
        "data": "decode_plan multilabel_annotations synthetic_images synthetic_multilabel "
        "synthetic_render synthetic_writer",
        "bench": "plan_report scaling_config scaling_data scaling_report scaling_worker",
    }.items()
    for name in names.split()
}

_URL = re.compile(r"\b(?:https?|ftp|file)://[^\s)>\]]+|\bmailto:\S+")
_TOKEN = re.compile(r"(?<![\w/.~$*<>{}@%+-])[\w.*<>{}$~@%+-]*(?:/|\.md\b|\.py\b)[\w.*<>{}$~@%+/-]*")
_PLACEHOLDER = re.compile(r"[*<>{}$~@%]|NNN")
_ALL_CAPS = re.compile(r"[A-Z][A-Z0-9_]+")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_EXTERNAL = re.compile(r"\b[A-Z][\w-]*'s\s+(?:\w+\s+)?$")
_LINK = re.compile(r"!?\[[^\]\n]*\]\([ \t]*<?([^)\s>]+)>?(?:[ \t]+\"[^\"]*\")?[ \t]*\)")
_SECTION = re.compile(r"([\w./-]+\.md)(?:#([\w-]+)|,?\s+\(?\"([^\"]+)\")")
_HEADING = re.compile(r" {0,3}(#{1,6})\s+(.*?)\s*#*\s*")
_BOLD_LEAD = re.compile(r"\s*(?:[-*+]\s+|\d+\.\s+)?\*\*([^*]+)\*\*.*")
_FENCE = re.compile(r" {0,3}(```|~~~)")


@dataclass(frozen=True)
class Problem:
    """One dangling reference: where it is, what it says, and why it resolves to nothing."""

    file: str
    line: int
    ref: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.ref} ({self.why})"


@dataclass(frozen=True)
class Block:
    """A piece of text of a file; its first line is line `line` of the file."""

    line: int
    text: str

    def line_of(self, offset: int) -> int:
        return self.line + self.text.count("\n", 0, offset)


# ---- where the text is -------------------------------------------------------------------------


def _docstrings(body: list[ast.stmt]) -> Iterator[Block]:
    """The docstrings of a body and of the classes and functions defined in it, at any depth."""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        value = body[0].value
        if isinstance(value.value, str):
            yield Block(value.lineno, value.value)
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _docstrings(node.body)
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for part in ("body", "orelse", "finalbody"):
                yield from _docstrings(getattr(node, part, []))


def _comments(source: str) -> Iterator[Block]:
    """The comments of a Python source, those on consecutive lines as one block."""
    lines = [
        (tok.start[0], tok.string.lstrip("#"))
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    start = 0
    for i in range(1, len(lines) + 1):
        if i == len(lines) or lines[i][0] != lines[i - 1][0] + 1:
            yield Block(lines[start][0], "\n".join(text for _, text in lines[start:i]))
            start = i


def python_blocks(source: str) -> tuple[list[Block], frozenset[str]]:
    """The docstrings (module, class, function) and comments of a Python source, and the names
    its code binds (parameters, assigned names). String literals of code are not text."""
    tree = ast.parse(source)
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return [*_docstrings(tree.body), *_comments(source)], frozenset(bound)


def _blank(text: str, pattern: re.Pattern[str]) -> str:
    """`text` with every match of `pattern` replaced by spaces (line breaks kept)."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def headings(text: str, *, bold_leads: bool = False) -> list[str]:
    """The ATX headings of a markdown text outside fenced code; with `bold_leads`, also the
    bold words that open a list item or paragraph (`- **Device fast path** (...)`)."""
    out = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := _HEADING.fullmatch(line)):
            out.append(m.group(2))
        elif not fenced and bold_leads and (m := _BOLD_LEAD.fullmatch(line)):
            out.append(m.group(1))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation other than `-` and
    `_` dropped, spaces to `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path, *, bold_leads: bool = False) -> frozenset[str]:
    """The anchors of a markdown file: its headings' slugs, repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(path.read_text(encoding="utf-8"), bold_leads=bold_leads):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return frozenset(out)


# ---- run-config keys and module names ----------------------------------------------------------


@cache
def config_keys() -> frozenset[str]:
    """Every `--set` key of the run config (`train.amp`, `data.train_clip.crop`) and every
    section (`data`, `data.train_clip`)."""
    from vidscale.config import RunConfig
    from vidscale.run.record import flat_config

    keys: set[str] = set()
    for key in flat_config(RunConfig()):
        parts = key.split(".")
        keys.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    return frozenset(keys)


def _is_field(name: str) -> bool:
    """Whether `name` is the name of a run-config field (`fast_path`), in any section."""
    return any(key.rsplit(".", 1)[-1] == name for key in config_keys())


@cache
def module_names() -> tuple[str, ...]:
    """The dotted name of every module and package of vidscale, from the file system."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return tuple(names)


@cache
def top_names() -> frozenset[str]:
    """vidscale's top-level packages and modules (`data`, `train`, `config`, ...)."""
    return frozenset(n.split(".")[1] for n in module_names() if "." in n)


def modules_named(first: str) -> list[str]:
    """The modules a dotted name starting with `first` may mean: `vidscale` itself, or any
    vidscale module (`vidscale.<first>` first) whose last part is `first`."""
    if first == "vidscale":
        return ["vidscale"]
    return sorted((n for n in module_names() if n.rsplit(".", 1)[-1] == first), key=len)


# ---- symbols -----------------------------------------------------------------------------------


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@cache
def _instance_attributes(cls: type) -> frozenset[str]:
    """Names a class declares that need not be class attributes: annotations, dataclass fields,
    and `self.x = ...` in its methods."""
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(getattr(klass, "__annotations__", {}))
        names.update(getattr(klass, "__dataclass_fields__", {}))
        try:
            tree = ast.parse(inspect.getsource(klass).lstrip())
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return frozenset(names)


def resolve(dotted: str) -> str | None:
    """None if the dotted name `dotted` (`vidscale.data.clip.ClipSpec.frames`) exists, else why:
    the longest importable module prefix is imported, the rest looked up attribute by attribute.
    A module that fails to import is not judged here (its own tests fail)."""
    parts = dotted.split(".")
    n = len(parts)
    try:
        while n > 1 and not _module_exists(".".join(parts[:n])):
            n -= 1
        if not _module_exists(parts[0]):
            return f"no module {parts[0]}"
        obj: object = importlib.import_module(".".join(parts[:n]))
    except Exception:
        return None
    for i in range(n, len(parts)):
        if hasattr(obj, parts[i]):
            obj = getattr(obj, parts[i])
        elif isinstance(obj, type) and parts[i] in _instance_attributes(obj):
            return None  # an instance attribute: nothing below it can be looked up
        else:
            return f"{'.'.join(parts[:i])} has no attribute {parts[i]}"
    return None


def check_symbol(name: str, bound: frozenset[str] = frozenset()) -> str | None:
    """None if the backticked dotted name `name` is no vidscale reference or resolves; else why.
    `bound`: the names the referring file binds; a name starting with one means that variable
    unless it is a top-level name followed by a module's (`data.media.decode`, `data` bound)."""
    parts = name.split(".")
    first, rest = parts[0], parts[1:]
    if name in config_keys() or rest[-1] in FILE_SUFFIXES:
        return None
    candidates = modules_named(first)
    if not candidates:
        where = RETIRED_MODULES.get(first)
        return f"no module {first}; it was {where}" if where else None
    top = first == "vidscale" or first in top_names()
    if first in bound and not (top and modules_named(rest[0])):
        return None  # the file's variable, unless a module path follows a top-level name
    whys = [resolve(".".join([module, *rest])) for module in candidates]
    return None if None in whys else str(whys[0])


def _symbols(text: str, bound: frozenset[str]) -> Iterator[tuple[int, str, str]]:
    """(offset, name, why) of each dangling symbol in backticks in `text`."""
    for m in _CODE_SPAN.finditer(text):
        name = m.group(1).strip().split("(", 1)[0]
        if _EXTERNAL.search(text, max(0, m.start() - 40), m.start()):
            continue  # another project's name: "PySlowFast's `multigrid.schedule`"
        if _DOTTED.fullmatch(name):
            why = check_symbol(name, bound)
        elif name in RETIRED_MODULES and "_" in name and not _is_field(name):
            why = check_symbol(f"{name}.{name}")  # a retired module named alone
        else:
            continue
        if why:
            yield m.start(), name, why


# ---- paths -------------------------------------------------------------------------------------


def _is_placeholder(token: str) -> bool:
    if _PLACEHOLDER.search(token):
        return True
    for part in token.rstrip("/").split("/"):
        stem, _, suffix = part.partition(".")
        if _ALL_CAPS.fullmatch(stem) and suffix != "md":
            return True
    return False


def _dirs_for(rel: Path) -> list[Path]:
    """Directories a relative path in file `rel` is tried under: the repository, vidscale/,
    the file's directory and each one above it, and for a test its mirror under vidscale/."""
    dirs = [Path("."), Path("vidscale"), *rel.parents]
    if rel.parts[0] == "tests":
        dirs.extend(Path("vidscale", *rel.parts[1:]).parents)
    return dirs


@cache
def _package_dirs() -> dict[str, tuple[Path, ...]]:
    """Each directory name inside vidscale/ and tests/ -> the directories holding one."""
    found: dict[str, list[Path]] = {}
    for top in ("vidscale", "tests"):
        for path in (ROOT / top).rglob("*"):
            if path.is_dir() and path.name != "__pycache__":
                found.setdefault(path.name, []).append(path.parent.relative_to(ROOT))
    return {name: tuple(parents) for name, parents in found.items()}


@cache
def written_names() -> frozenset[str]:
    """The bare markdown file names that vidscale's code writes or reads (`summary.md`, a string
    constant of its code): a doc naming one names an output, not a doc."""
    quoted = re.compile(r"[\"']([\w.-]+\.md)[\"']")
    texts = (path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py"))
    return frozenset(name for text in texts for name in quoted.findall(text))


def path_token(root: Path, rel: Path, token: str) -> str | None:
    """`token` without trailing punctuation if it is a path reference to check, else None."""
    token = token.rstrip(".-")
    if not token or token.startswith(("/", "../shared/")) or _is_placeholder(token):
        return None
    bare = token.removeprefix("./")
    first = bare.split("/", 1)[0]
    if "/" not in bare:  # a doc, a test file or a retired module by its name
        stem = token.removesuffix(".py")
        if token.endswith(".md"):
            return token if token not in written_names() else None
        checked = stem.startswith("test_") or stem in RETIRED_MODULES
        return token if stem != token and checked else None
    if first in TOP_LEVEL:
        return token if bare != first + "/" else None
    if first not in _package_dirs() and not any(
        (root / d / first).is_dir() for d in _dirs_for(rel)
    ):
        return None
    return token if token.endswith("/") or Path(token).suffix in PATH_EXTENSIONS else None


def path_exists(root: Path, rel: Path, token: str) -> bool:
    """Whether path `token`, written in file `rel`, names something under `root`."""
    bare = token.removeprefix("./")
    first = bare.split("/", 1)[0]
    if first in TOP_LEVEL:
        return (root / bare).exists()
    if bare.endswith(".py") and "/" not in bare:
        return any(next((root / top).rglob(bare), None) for top in ("vidscale", "tests", "scripts"))
    bases = [*_dirs_for(rel), Path("docs"), *_package_dirs().get(first, ())]
    return any((root / base / bare).exists() for base in bases)


# ---- checking a file ---------------------------------------------------------------------------


def _check_section(root: Path, rel: Path, target: str, anchor: str, quoted: str) -> str | None:
    """None if markdown file `target` (as written in `rel`) has the section, else why not."""
    bases = [*_dirs_for(rel), Path("docs")]
    path = next((root / b / target for b in bases if (root / b / target).is_file()), None)
    if path is None:
        return None  # the path itself is reported as a path
    if anchor:
        return None if anchor in anchors(path) else f"no heading #{anchor} in {target}"
    wanted = slug(" ".join(quoted.split()))
    if any(s == wanted or s.startswith(wanted + "-") for s in anchors(path, bold_leads=True)):
        return None
    return f"no heading {' '.join(quoted.split())!r} in {target}"


def check_link(root: Path, rel: Path, target: str) -> str | None:
    """None if markdown link `target` in `rel` resolves (file and anchor), else why not."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("../shared/"):
        return None
    path_part, _, anchor = target.partition("#")
    path = root / rel.parent / path_part if path_part else root / rel
    if not path.exists():
        return "no such file or directory"
    if anchor and path.suffix == ".md" and anchor not in anchors(path.resolve()):
        return f"no heading #{anchor} in {path_part or rel.name}"
    return None


def check_text(
    root: Path, rel: Path, block: Block, bound: frozenset[str] = frozenset()
) -> Iterator[Problem]:
    """The dangling references in one block of text of file `rel` (relative to `root`), and
    of a markdown file its links. `bound`: the names the file's code binds."""
    file = rel.as_posix()
    text = block.text
    if rel.suffix == ".md":
        for m in _LINK.finditer(text):
            why = check_link(root, rel, m.group(1))
            if why:
                yield Problem(file, block.line_of(m.start()), m.group(1), why)
        text = _blank(text, _LINK)
    text = _blank(text, _URL)
    for m in _SECTION.finditer(text):
        why = _check_section(root, rel, m.group(1), m.group(2) or "", m.group(3) or "")
        if why:
            yield Problem(file, block.line_of(m.start()), " ".join(m.group(0).split()), why)
    for m in _TOKEN.finditer(text):
        token = path_token(root, rel, m.group(0))
        if token is not None and not path_exists(root, rel, token):
            yield Problem(file, block.line_of(m.start()), token, "no such file or directory")
    for offset, name, why in _symbols(text, bound):
        yield Problem(file, block.line_of(offset), name, why)


def check_file(root: Path, rel: Path) -> list[Problem]:
    """The dangling references of file `rel` under `root` (Python or markdown)."""
    text = (root / rel).read_text(encoding="utf-8")
    if rel.suffix == ".py":
        blocks, bound = python_blocks(text)
    else:
        blocks, bound = [Block(1, text)], frozenset()
    found = {p for block in blocks for p in check_text(root, rel, block, bound)}
    return sorted(found, key=lambda p: (p.line, p.ref))


def sources(root: Path) -> list[Path]:
    """The files whose references are checked: the Python of vidscale/, tests/ and scripts/, the
    markdown of docs/ and the README."""
    found = [
        *(p for top in ("vidscale", "tests", "scripts") for p in (root / top).rglob("*.py")),
        *(root / "docs").rglob("*.md"),
        root / "README.md",
    ]
    return sorted(p.relative_to(root) for p in found if p.is_file())


def check_repository(root: Path = ROOT) -> list[Problem]:
    """Every dangling reference of the repository at `root`."""
    return [p for rel in sources(root) for p in check_file(root, rel)]
