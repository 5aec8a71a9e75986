"""Every file, module, symbol and doc-section reference in docstrings, comments and docs
resolves (tests/references.py says what counts as one), and the checker finds what it should
on small made-up trees, so that it cannot pass by finding nothing."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tests.references import (
    ROOT,
    Problem,
    check_file,
    check_repository,
    check_symbol,
    config_keys,
    python_blocks,
    slug,
    sources,
)


def _report(problems: list[Problem]) -> str:
    by_file: dict[str, list[str]] = defaultdict(list)
    for p in problems:
        by_file[p.file].append(f"  {p}")
    lines = [f"{len(problems)} dangling references in {len(by_file)} files:"]
    for file in sorted(by_file):
        lines.extend(by_file[file])
    return "\n".join(lines)


def test_every_reference_resolves() -> None:
    problems = check_repository(ROOT)
    assert not problems, _report(problems)


def test_the_sources_cover_code_tests_and_docs() -> None:
    found = {p.as_posix() for p in sources(ROOT)}
    assert {"README.md", "docs/design.md", "vidscale/config.py", "tests/conftest.py"} <= found


# ---- the checker on made-up trees -------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def _found(root: Path, rel: str) -> list[tuple[int, str]]:
    return [(p.line, p.ref) for p in check_file(root, Path(rel))]


def test_a_dangling_path_is_found_and_an_existing_one_is_not(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "vidscale/data/media/decode.py": "",
            "vidscale/data/refs.py": '"""Frames come from vidscale/data/media/decode.py\n'
            "(media/decode.py, data/media/), not vidscale/data/decode.py.\n"
            'Nor from media/decoder.py."""\n',
        },
    )
    assert _found(tmp_path, "vidscale/data/refs.py") == [
        (2, "vidscale/data/decode.py"),
        (3, "media/decoder.py"),
    ]


def test_bare_test_files_and_retired_modules_are_paths(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "tests/fastpath/test_rule.py": "",
            "vidscale/refs.py": '"""test_rule.py, not test_gone.py nor fast_path_rule.py;\n'
            'a scratch faults.py is not checked."""\n',
        },
    )
    assert _found(tmp_path, "vidscale/refs.py") == [(1, "fast_path_rule.py"), (1, "test_gone.py")]


def test_placeholders_urls_outputs_and_other_projects_are_not_paths(tmp_path: Path) -> None:
    text = (
        '"""RUN/checkpoints/last.pt, OUT/summary.json, metrics.jsonl, vidscale/*.py,\n'
        "vidscale/<package>/x.py, ../shared/notes.md, $OUT/results.json, epoch_NNNN.pt,\n"
        "https://github.com/a/b/blob/main/vidscale/gone.py, PySlowFast's\n"
        'configs/Kinetics/I3D_8x8_R50.yaml and utils/misc.py, and/or in the run dir."""\n'
    )
    _tree(tmp_path, {"vidscale/refs.py": text})
    assert _found(tmp_path, "vidscale/refs.py") == []


def test_only_docstrings_and_comments_are_read(tmp_path: Path) -> None:
    text = 'PATH = "vidscale/gone.py"\n\n\ndef f() -> None:\n    """Hi."""\n    # tests/gone.py\n'
    _tree(tmp_path, {"vidscale/refs.py": text})
    assert _found(tmp_path, "vidscale/refs.py") == [(6, "tests/gone.py")]


def test_lines_of_docstrings_and_comment_blocks() -> None:
    source = '"""One.\n\nThree."""\n\nx = 1  # five\n# six\n'
    blocks, bound = python_blocks(source)
    assert [(b.line, b.text) for b in blocks] == [(1, "One.\n\nThree."), (5, " five\n six")]
    assert blocks[0].line_of(blocks[0].text.index("Three")) == 3
    assert "x" in bound


def test_config_keys_are_not_symbols() -> None:
    keys = config_keys()
    assert {"train.amp", "data.root", "model.init_from", "optim.lr_per_8_clips"} <= keys
    assert {"data.train_clip", "data.train_clip.crop", "data"} <= keys
    for key in ("train.amp", "data.root", "optim.lr_per_8_clips", "data.train_clip.crop"):
        assert check_symbol(key) is None, key
    assert check_symbol("train.csv") is None  # a file name


@pytest.mark.parametrize(
    "name",
    [
        "vidscale.train.loop.Trainer",
        "train.loop.Trainer.run",
        "data.media.decode.usable_cpus",
        "decode.usable_cpus",  # a module inside vidscale by its last part
        "fastpath.probe.decide",
        "vidscale.config.RunConfig.train",  # a dataclass field without a class attribute
        "config.TrainConfig.amp",
        "Trainer.run",  # not a vidscale name: not checked
        "torch.compile",
    ],
)
def test_existing_symbols_resolve(name: str) -> None:
    assert check_symbol(name) is None


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("vidscale.data.decode.usable_cpus", "vidscale.data has no attribute decode"),
        ("data.decode.usable_cpus", "vidscale.data has no attribute decode"),
        ("train.loop.Trainer.nowhere", "vidscale.train.loop.Trainer has no attribute nowhere"),
        ("decode.gone", "vidscale.data.media.decode has no attribute gone"),
        ("fast_path_probe.decide", "no module fast_path_probe"),
    ],
)
def test_moved_symbols_are_found(name: str, why: str) -> None:
    found = check_symbol(name)
    assert found is not None and found.startswith(why), found


def test_symbols_in_text(tmp_path: Path) -> None:
    text = (
        "def f(decode: object) -> None:\n"
        '    """`decode.gone` is the parameter; `train.amp` a key; `step.run.train_step(x, y)`\n'
        "    exists; `step.run.gone(x)` and `vidscale.data.decode` do not; PySlowFast's\n"
        '    `multigrid.schedule` is theirs; see `fast_path_rule`."""\n'
    )
    _tree(tmp_path, {"vidscale/refs.py": text})
    assert _found(tmp_path, "vidscale/refs.py") == [
        (3, "step.run.gone"),
        (3, "vidscale.data.decode"),
        (4, "fast_path_rule"),
    ]


def test_markdown_links_anchors_and_sections(tmp_path: Path) -> None:
    guide = "# Guide\n\n## Second part (2026)\n\n```\n# not a heading\n```\n\n- **Bold lead** x\n"
    usage = (
        "[a](guide.md#second-part-2026) [b](guide.md#third) [c](missing.md) [d](https://x.org/y)\n"
        "[e](#usage) [f](../README.md) [g](guide.md#not-a-heading)\n"
        'docs/guide.md, "Second part" and docs/guide.md, "Bold lead" but docs/guide.md, "Nope";\n'
        "guide.md#guide, guide.md#gone and `vidscale/data/gone.py`.\n\n# Usage\n"
    )
    _tree(tmp_path, {"README.md": "", "docs/guide.md": guide, "docs/usage.md": usage})
    assert [(p.line, p.ref, p.why) for p in check_file(tmp_path, Path("docs/usage.md"))] == [
        (1, "guide.md#third", "no heading #third in guide.md"),
        (1, "missing.md", "no such file or directory"),
        (2, "guide.md#not-a-heading", "no heading #not-a-heading in guide.md"),
        (3, 'docs/guide.md, "Nope"', "no heading 'Nope' in docs/guide.md"),
        (4, "guide.md#gone", "no heading #gone in guide.md"),
        (4, "vidscale/data/gone.py", "no such file or directory"),
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        (
            "`auto` vs fp32 at 224² (CPU-2 Xeon, 2026-11-23)",
            "auto-vs-fp32-at-224²-cpu-2-xeon-2026-11-23",
        ),
        ("Runs that survive: what a run survives", "runs-that-survive-what-a-run-survives"),
        ("Images: large-batch [ImageNet](x.md) training", "images-large-batch-imagenet-training"),
        ("snake_case and --flags", "snake_case-and---flags"),
    ],
)
def test_slug_is_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor
