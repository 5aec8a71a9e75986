"""The layout registry: every `data.layout` name is registered once by its family's module,
passes config validation and is offered by `vidscale prepare --layout`; an unknown name is a
one-line error naming the field and the known names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vidscale.cli import build_parser
from vidscale.config import ConfigError, RunConfig, validate
from vidscale.data.annotations import AnnotationError
from vidscale.data.layouts import (
    IMAGE_LAYOUTS,
    LAYOUTS,
    VIDEO_LAYOUTS,
    check_layout_name,
    layout,
    read_layout,
)
from vidscale.data.layouts.registry import LAYOUTS_BY_NAME, register_layout


def with_layout(name: str) -> RunConfig:
    cfg = RunConfig()
    sets = name in LAYOUTS_BY_NAME and layout(name).multi_label
    data = dataclasses.replace(cfg.data, layout=name, multi_label=sets)
    return dataclasses.replace(cfg, data=data)


def test_the_names_are_the_registered_readers_split_by_media() -> None:
    assert tuple(LAYOUTS_BY_NAME) == LAYOUTS
    assert set(LAYOUTS) == set(IMAGE_LAYOUTS) | set(VIDEO_LAYOUTS)
    assert {"imagenet", "imagefolder"} == set(IMAGE_LAYOUTS)
    video = {"generic", "kinetics", "ucf101", "hmdb51", "ssv2", "charades", "multilabel"}
    assert video == set(VIDEO_LAYOUTS)
    assert RunConfig().data.layout in LAYOUTS
    assert {n for n in LAYOUTS if layout(n).numbered_splits} == {"ucf101", "hmdb51"}
    assert {n for n in LAYOUTS if layout(n).multi_label} == {"charades", "multilabel"}


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_registered_name_validates_and_reads_an_empty_root_as_an_annotation_error(
    name: str, tmp_path: Path
) -> None:
    validate(with_layout(name))
    assert check_layout_name(name) == name
    with pytest.raises(AnnotationError):  # its reader runs, and finds no annotations
        read_layout(name, tmp_path)


def test_an_unknown_name_is_one_line_naming_the_field_and_the_known_names() -> None:
    with pytest.raises(ConfigError) as err:
        validate(with_layout("coco"))
    assert str(err.value) == f"data.layout: unknown layout 'coco'; known: {', '.join(LAYOUTS)}"


@pytest.mark.parametrize("name", ["ucf101", "hmdb51"])
def test_numbered_splits_are_one_to_three(name: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split must be 1, 2 or 3, got 4"):
        read_layout(name, tmp_path, split=4)


def test_a_name_registers_once() -> None:
    with pytest.raises(ValueError, match="'generic' registered twice"):
        register_layout("generic")(LAYOUTS_BY_NAME["generic"].read)
    assert tuple(LAYOUTS_BY_NAME) == LAYOUTS


def test_prepare_offers_every_layout_and_bench_scaling_the_video_ones() -> None:
    parser = build_parser()
    for name in LAYOUTS:
        args = parser.parse_args(["prepare", "--layout", name, "--root", ".", "--out", "x"])
        assert args.layout == name
    for name in VIDEO_LAYOUTS:
        assert parser.parse_args(["bench", "scaling", "--layout", name]).layout == name
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "scaling", "--layout", IMAGE_LAYOUTS[0]])
