"""`docs/cli.md` and `docs/config.md` are generated from the parsers and the config dataclasses
(`vidscale.cli.reference`) and committed; these tests fail when either is stale.

After changing a command, a flag or a config field, regenerate both and review the diff:

    python -m vidscale.cli.reference
    git diff docs/cli.md docs/config.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vidscale.cli import build_parser
from vidscale.cli.reference import (
    CLI_DOC,
    CONFIG_DOC,
    MAX_CELL,
    REGENERATE,
    REPO_ROOT,
    cli_reference,
    config_reference,
    main,
    references,
)
from vidscale.config import RunConfig

DOCS = REPO_ROOT / "docs"


@pytest.mark.parametrize("name", [CLI_DOC, CONFIG_DOC])
def test_committed_docs_are_what_the_generator_writes(name: str) -> None:
    path = DOCS / name
    assert path.is_file(), f"docs/{name} is missing: run `{REGENERATE}`"
    assert path.read_text(encoding="utf-8") == references()[name], (
        f"docs/{name} is stale: run `{REGENERATE}` and review `git diff docs/{name}`"
    )


def test_the_output_is_deterministic() -> None:
    assert cli_reference() == cli_reference()
    assert config_reference() == config_reference()
    for text in references().values():
        assert str(REPO_ROOT) not in text  # no machine paths


def test_every_command_has_a_section() -> None:
    text = cli_reference().splitlines()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sub.choices, "the parser has no commands"
    for name, parser in sub.choices.items():
        assert f"## vidscale {name}" in text, f"no section for `vidscale {name}`"
        assert f"usage: vidscale {name}" in "\n".join(text)
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for child in (c for action in nested for c in action.choices):
            assert f"### vidscale {name} {child}" in text


def leaf_fields(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(`--set` key, default) of every plain field under the dataclass instance `node`."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            yield from leaf_fields(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value


def table_rows(text: str) -> dict[str, list[str]]:
    """`--set` key -> the cells of its row in config.md (the `\\|` escapes undone)."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip().replace("\\|", "|") for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells
    return rows


def test_every_config_field_is_listed_with_its_default() -> None:
    rows = table_rows(config_reference())
    cfg = RunConfig()
    fields = dict(leaf_fields(cfg, ""))
    assert len(fields) > 50
    for key, default in fields.items():
        assert key in rows, f"config.md lists no `{key}`"
        assert rows[key][2] == f"`{json.dumps(default)}`", f"{key}: default {default!r}"
    assert set(rows) == set(fields), "config.md lists fields RunConfig does not have"
    for section in (f.name for f in dataclasses.fields(cfg) if f.name != "recipe"):
        assert f"## {section}" in config_reference().splitlines()


def test_descriptions_come_from_the_source_and_stay_short() -> None:
    rows = table_rows(config_reference())
    # a trailing comment, the comment above a field, and the class docstring
    assert "UCF101 / HMDB51 split" in rows["data.split"][3]
    assert rows["dist.timeout_s"][3].startswith("Seconds a rank waits")
    assert rows["aavg.k"][3].startswith("`k`: optimizer steps between averagings")
    assert all(len(cells[3]) <= MAX_CELL for cells in rows.values())


def test_check_names_a_stale_or_missing_file_and_passes_when_fresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--check"], docs_dir=tmp_path) == 1
    err = capsys.readouterr().err
    assert CLI_DOC in err and CONFIG_DOC in err and REGENERATE in err
    assert not list(tmp_path.iterdir()), "--check wrote something"

    assert main([], docs_dir=tmp_path) == 0
    assert (tmp_path / CLI_DOC).read_text(encoding="utf-8") == cli_reference()
    assert main(["--check"], docs_dir=tmp_path) == 0
    assert capsys.readouterr().err == ""

    stale = tmp_path / CONFIG_DOC
    stale.write_text(stale.read_text(encoding="utf-8") + "edited by hand\n", encoding="utf-8")
    assert main(["--check"], docs_dir=tmp_path) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and CONFIG_DOC in lines[0] and REGENERATE in lines[0]
    assert "edited by hand" in stale.read_text(encoding="utf-8")
