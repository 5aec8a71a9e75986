"""The generated reference: `docs/cli.md` from the argument parsers and `docs/config.md` from the
run config's dataclasses, so that neither can drift from the code.

    python -m vidscale.cli.reference           # rewrite both files
    python -m vidscale.cli.reference --check   # exit 1, naming each stale file

`cli_reference` and `config_reference` return the markdown; both are deterministic (no dates,
no machine paths, help formatted at a fixed width whatever the terminal). A config field's
description comes from its source (`field_descriptions`): `metadata={"help": ...}` where given,
else the comment on its line, else the comment lines right above it, else the sentence naming
it in the comment that opens its group of fields, else the sentence of the class docstring that
names it in backticks; empty if none. A long one is cut to its first sentence, at most
`MAX_CELL` characters.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import json
import re
import sys
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import vidscale
from vidscale.atomic import atomic_write_text
from vidscale.cli import build_parser
from vidscale.config import RunConfig

__all__ = [
    "CLI_DOC",
    "CONFIG_DOC",
    "MAX_CELL",
    "REGENERATE",
    "REPO_ROOT",
    "cli_reference",
    "config_reference",
    "config_sections",
    "field_descriptions",
    "format_default",
    "format_type",
    "main",
    "references",
]

REGENERATE = "python -m vidscale.cli.reference"
PACKAGE_DIR = Path(vidscale.__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
CLI_DOC = "cli.md"
CONFIG_DOC = "config.md"
HELP_WIDTH = 98  # argparse's width at COLUMNS=100, as the `--help` snapshots of tests/cli
MAX_CELL = 200  # longest description in a config table, in characters

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"(])")
_FIELD_CLAUSE = re.compile(r";\s+(?=`)")  # `a` does this; `b` does that: one clause each
_LEADING_NAMES = re.compile(r"(?:`\w+(?:\s[^`]*)?`(?:\s*(?:/|,|and|or|x)\s*)?)+")


# -- text helpers --------------------------------------------------------------------------------


def _sentences(text: str, *, field_clauses: bool = False) -> list[str]:
    """`text`'s sentences, each on one line (paragraphs split at blank lines, lines joined);
    with `field_clauses`, a clause that opens with a backticked name after `;` is one too."""
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        joined = " ".join(paragraph.split())
        for sentence in _SENTENCE_END.split(joined):
            parts = _split_outside(sentence, _FIELD_CLAUSE) if field_clauses else [sentence]
            out += [part.strip() for part in parts if part.strip()]
    return out


def _depths(text: str) -> list[int]:
    """The parenthesis depth at each character of `text` (an opening one counts as inside)."""
    depths, depth = [], 0
    for char in text:
        depth += char == "("
        depths.append(depth)
        depth -= char == ")" and depth > 0
    return depths


def _split_outside(text: str, separator: re.Pattern[str]) -> list[str]:
    """`text` split at the matches of `separator` outside parentheses."""
    depths = _depths(text)
    parts, start = [], 0
    for match in separator.finditer(text):
        if depths[match.start()] == 0:
            parts.append(text[start : match.start()])
            start = match.end()
    return [*parts, text[start:]]


def _about(sentence: str, needle: str) -> str:
    """The part of `sentence` about `needle`: the parenthesis holding it when that has 8 words
    or more, else the sentence; then of that, the `;`-separated clause that holds it."""
    at = sentence.index(needle)
    depths = _depths(sentence)
    text = sentence
    if depths[at] > 0:
        start = max(i for i in range(at) if sentence[i] == "(" and depths[i] == depths[at])
        inner = sentence[start + 1 :]
        ends = [i for i, d in enumerate(_depths(inner)) if d == 0 and inner[i] == ")"]
        inner = inner[: ends[0]] if ends else inner
        text = inner if len(inner.split()) >= 8 else sentence
    clauses = _split_outside(text, re.compile(r";\s+"))
    return next((c.strip() for c in clauses if needle in c), text)


def _cut(text: str, limit: int = MAX_CELL) -> str:
    """`text` if at most `limit` characters, else cut at a word boundary and ended with `…`."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    return (head.rsplit(" ", 1)[0] if " " in head else head).rstrip(" ,;:") + "…"


def _short(text: str) -> str:
    """A comment fit for a table cell: whole when short, else its first sentence (cut)."""
    text = " ".join(text.split())
    if len(text) <= MAX_CELL:
        return text
    return _cut(_sentences(text)[0])


def _cell(text: str) -> str:
    """`text` safe inside a markdown table cell (one line, `|` escaped)."""
    return " ".join(text.split()).replace("|", "\\|")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def _doc_header(title: str, source: str, sibling: str, more: str) -> list[str]:
    """The title and opening paragraph of a generated file."""
    return [
        f"# {title}",
        "",
        f"Generated from {source} by `{REGENERATE}`: do not edit it by hand. After changing "
        f"them, run that command to rewrite this file and [{sibling}]({sibling}); "
        f"`tests/cli/test_reference.py` fails while either is stale. {more}",
        "",
    ]


# -- docs/cli.md ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Command:
    words: tuple[str, ...]  # after `vidscale`
    parser: argparse.ArgumentParser
    summary: str  # the command's help in its parent's list, else its description's first sentence

    @property
    def name(self) -> str:
        return " ".join(("vidscale", *self.words))


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[_Command]:
    """`parser` and every command below it, depth first, in the order `--help` lists them."""
    if not words:
        yield _Command(words, parser, _first_sentence(parser.description))
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        seen: set[int] = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:  # an alias of a command already listed
                continue
            seen.add(id(sub))
            summary = helps.get(name) or _first_sentence(sub.description)
            yield _Command((*words, name), sub, summary)
            yield from _commands(sub, (*words, name))


def _first_sentence(text: str | None) -> str:
    sentences = _sentences(text or "")
    return sentences[0] if sentences else ""


def _help_text(command: _Command) -> str:
    """The command's `--help` as `vidscale ...` prints it at width `HELP_WIDTH` (sets the
    parser's prog and formatter: call it on a parser built for the purpose)."""
    parser = command.parser
    parser.prog = command.name
    formatter_class: Any = parser.formatter_class  # any HelpFormatter class takes `width`
    parser.formatter_class = functools.partial(formatter_class, width=HELP_WIDTH)
    try:
        return parser.format_help()
    finally:
        parser.formatter_class = formatter_class


def _heading_level(command: _Command) -> str:
    return "#" * (2 + max(0, len(command.words) - 1))


def cli_reference() -> str:
    """The markdown of `docs/cli.md`: a header, a table of contents, then for `vidscale` and
    every command below it (depth first, in `--help` order) a section with the command's
    one-line summary and its `--help` text, formatted at a fixed width."""
    commands = list(_commands(build_parser()))
    lines = _doc_header(
        "Command-line reference",
        "the `vidscale` argument parsers (`vidscale/cli/`)",
        CONFIG_DOC,
        f"The run config fields that `--set section.field=value` changes are in [{CONFIG_DOC}]"
        f"({CONFIG_DOC}).",
    )
    lines += ["## Contents", ""]
    for command in commands:
        indent = "  " * max(0, len(command.words) - 1)
        lines.append(f"{indent}- [{command.name}](#{_slug(command.name)}): {command.summary}")
    lines.append("")
    for command in commands:
        lines += [f"{_heading_level(command)} {command.name}", ""]
        if command.summary:
            lines += [command.summary, ""]
        lines += ["```text", _help_text(command).rstrip("\n"), "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# -- docs/config.md: field descriptions from the source ------------------------------------------


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line number -> (comment text without `#`, whether the comment is alone on its line)."""
    found: dict[int, tuple[str, bool]] = {}
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            alone = not lines[row - 1][:col].strip()
            found[row] = (tok.string.lstrip("#").strip(), alone)
    return found


def _trailing(node: ast.AnnAssign, comments: dict[int, tuple[str, bool]]) -> str:
    """The comments on the field's own lines, joined; "" if none."""
    end = node.end_lineno or node.lineno
    return " ".join(comments[r][0] for r in range(node.lineno, end + 1) if r in comments)


def _above(node: ast.AnnAssign, comments: dict[int, tuple[str, bool]]) -> str:
    """The comment lines right above the field (no blank line between), joined; "" if none."""
    above: list[str] = []
    row = node.lineno - 1
    while row in comments and comments[row][1]:
        above.insert(0, comments[row][0])
        row -= 1
    return " ".join(above)


def _in_docstring(name: str, docstring: str) -> str:
    """The docstring's sentence about `name`: one that opens with `name` in backticks (alone,
    as in `name = N`, or in a list of names), else the part about it (`_about`) of the first
    sentence naming it in backticks; "" if none."""
    sentences = _sentences(docstring, field_clauses=True)
    mention = re.compile(rf"`{re.escape(name)}(?:\s[^`]*)?`")
    for sentence in sentences:
        opening = _LEADING_NAMES.match(sentence)
        if opening and mention.search(opening.group(0)):
            return sentence
    for sentence in sentences:
        found = mention.search(sentence)
        if found:
            return _about(sentence, found.group(0))
    return ""


def _in_block(name: str, block: str) -> str:
    """The first sentence of the comment `block` that names `name`; "" if none."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    return next((s for s in _sentences(block) if word.search(s)), "")


def _fields(klass: ast.ClassDef, names: set[str]) -> Iterator[tuple[str, ast.AnnAssign]]:
    """(name, statement) of each field of the class statement `klass` among `names`."""
    for node in klass.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.AnnAssign) and isinstance(target, ast.Name) and target.id in names:
            yield target.id, node


@functools.cache
def field_descriptions(cls: type) -> dict[str, str]:
    """Field name -> one-line description (at most `MAX_CELL` characters, "" if none) of the
    dataclass `cls`, read from its source: `metadata["help"]`, else the field's own comment
    (on its line, else right above it), else the sentence naming it in the comment above an
    earlier field of its group (the fields that follow that comment with no blank line and no
    comment of their own between), else the class docstring's sentence about it."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    klass = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef))
    comments = _comments(source)
    docstring = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, str] = {}
    group, previous_end = "", 0  # the comment above the group's first field
    for name, node in _fields(klass, set(fields)):
        if any(not line.strip() for line in lines[previous_end : node.lineno - 1]):
            group = ""
        previous_end = node.end_lineno or node.lineno
        given = fields[name].metadata.get("help")
        trailing, above = _trailing(node, comments), _above(node, comments)
        own = str(given) if given else trailing or above
        if own:
            out[name] = _short(own)
        else:
            out[name] = _cut(_in_block(name, group) or _in_docstring(name, docstring))
        if trailing or above:
            group = "" if trailing else above
    return out


# -- docs/config.md: tables ----------------------------------------------------------------------


def format_type(hint: Any) -> str:
    """A field's type as a reader writes it: `int`, `"a" | "b"`, `tuple[float, ...]`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(format_type(a) for a in args)
    if origin is tuple:
        parts = ["..." if a is Ellipsis else format_type(a) for a in args]
        return f"tuple[{', '.join(parts)}]"
    if hint is type(None):
        return "None"
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def format_default(value: Any) -> str:
    """A default as JSON (tuples as lists), as `--set` and `config.json` write it."""
    try:
        return json.dumps(value)
    except TypeError:
        return repr(value)


def _class_line(cls: type) -> str:
    """`ClassName` (its file, relative to the repository) and its docstring's first sentence."""
    path = Path(inspect.getfile(cls)).resolve().relative_to(REPO_ROOT).as_posix()
    summary = _first_sentence(inspect.cleandoc(cls.__dict__.get("__doc__") or ""))
    return f"`{cls.__name__}` in `{path}`" + (f": {summary}" if summary else "")


def _table(node: Any, prefix: str) -> list[str]:
    """The rows of the plain (non-dataclass) fields of the dataclass instance `node`."""
    cls: type = type(node)
    hints = typing.get_type_hints(cls)
    docs = field_descriptions(cls)
    rows = ["| Field | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            continue
        cells = [
            f"`{prefix}{f.name}`",
            f"`{format_type(hints[f.name])}`",
            f"`{format_default(value)}`",
            docs.get(f.name, ""),
        ]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def _sections(node: Any, key: str, level: int) -> list[str]:
    """The section of the dataclass instance `node` at `key`, then those of its sub-sections."""
    lines = ["#" * level + f" {key}", "", _class_line(type(node)), "", *_table(node, key + "."), ""]
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            lines += _sections(value, f"{key}.{f.name}", level + 1)
    return lines


def config_sections(node: Any, prefix: str = "") -> Iterator[str]:
    """The keys of the sections under the dataclass instance `node` (its dataclass fields,
    `data`, then those below them, `data.train_clip`), depth first in field order."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            yield prefix + f.name
            yield from config_sections(value, f"{prefix}{f.name}.")


def config_reference() -> str:
    """The markdown of `docs/config.md`: a header, the top-level fields of `RunConfig`, then
    for every section (in field order, sub-sections after their section) a table of its fields
    with their `--set` key, type, default (`RunConfig()`'s, as JSON) and description."""
    cfg = RunConfig()
    sections = [key for key in config_sections(cfg) if "." not in key]
    lines = _doc_header(
        "Run configuration reference",
        "`RunConfig` (`vidscale/config.py`) and its sections' dataclasses",
        CLI_DOC,
        "A run resolves a recipe (or `--config FILE`), then `--data` and each `--set "
        "section.field=value` on top, e.g. `vidscale train --recipe NAME --set "
        "optim.accumulate=4`, and saves the result as `config.json` in its run directory. "
        "A value parses as JSON where it can (`4`, `true`, `null`, `[1, 2]`), else as text; "
        "`a,b` is a list too. The defaults below are the dataclasses' own; a recipe sets many.",
    )
    lines += ["## Contents", "", "- [Top level](#top-level)"]
    lines += ["  " * key.count(".") + f"- [{key}](#{_slug(key)})" for key in config_sections(cfg)]
    lines += ["", "## Top level", "", _class_line(RunConfig), "", *_table(cfg, ""), ""]
    for name in sections:
        lines += _sections(getattr(cfg, name), name, 2)
    return "\n".join(lines).rstrip("\n") + "\n"


# -- the command ---------------------------------------------------------------------------------


def references() -> dict[str, str]:
    """File name under docs/ -> its generated text."""
    return {CLI_DOC: cli_reference(), CONFIG_DOC: config_reference()}


def main(argv: Sequence[str] | None = None, *, docs_dir: Path | None = None) -> int:
    """Write the generated files into `docs_dir` (default: the repository's docs/), each only
    when its text changed, and return 0. With `--check`, write nothing: print one line on
    stderr for each file that is missing or differs, naming it and `REGENERATE`, and return 1
    if there is any, else 0."""
    parser = argparse.ArgumentParser(
        prog=REGENERATE, description=f"Generate docs/{CLI_DOC} and docs/{CONFIG_DOC}."
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is stale"
    )
    args = parser.parse_args(argv)
    directory = docs_dir if docs_dir is not None else REPO_ROOT / "docs"
    stale: list[Path] = []
    for name, text in references().items():
        path = directory / name
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            atomic_write_text(path, text)
            print(f"wrote {_shown(path)}")
    if args.check:
        for path in stale:
            print(f"{_shown(path)} is stale: regenerate it with `{REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    return 0


def _shown(path: Path) -> str:
    """`path` relative to the repository when inside it, else as given."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


if __name__ == "__main__":
    raise SystemExit(main())
