"""The strategy registry: every `dist.strategy` name is registered once, builds its strategy,
passes config validation and is offered by the CLI; an unknown name is a one-line error naming
the field and the known names."""

from __future__ import annotations

import dataclasses

import pytest

from vidscale.cli import build_parser
from vidscale.config import ConfigError, RunConfig, validate
from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.env import init_distributed
from vidscale.distributed.parallel import STRATEGIES, DataParallel, register_strategy
from vidscale.distributed.strategy import build_strategy, check_strategy_name, strategy_names
from vidscale.distributed.sync.comm_hooks import CommConfig


def with_strategy(name: str) -> RunConfig:
    cfg = RunConfig()
    return dataclasses.replace(cfg, dist=dataclasses.replace(cfg.dist, strategy=name))


def test_the_names_are_the_registered_classes_and_include_the_default() -> None:
    assert sorted(strategy_names()) == sorted(STRATEGIES)
    assert {"ddp", "aavg"} <= set(strategy_names())
    assert strategy_names()[0] == RunConfig().dist.strategy  # the default leads the list
    for name, cls in STRATEGIES.items():
        assert issubclass(cls, DataParallel) and cls.name == name


@pytest.mark.parametrize("name", strategy_names())
def test_every_registered_name_builds_its_strategy_and_validates(name: str) -> None:
    strategy = build_strategy(init_distributed("cpu"), CommConfig(), name=name, aavg=AAVGConfig())
    assert type(strategy) is STRATEGIES[name]
    validate(with_strategy(name))


def test_an_unknown_name_is_one_line_naming_the_field_and_the_known_names() -> None:
    known = ", ".join(strategy_names())
    message = f"dist.strategy: unknown strategy 'horovod'; known: {known}"
    with pytest.raises(ConfigError) as err:
        validate(with_strategy("horovod"))
    assert str(err.value) == message
    with pytest.raises(ValueError) as build_err:
        build_strategy(init_distributed("cpu"), CommConfig(), name="horovod")
    assert str(build_err.value) == message
    assert check_strategy_name("ddp") == "ddp"


def test_a_name_registers_once() -> None:
    with pytest.raises(ValueError, match="'ddp' registered twice"):
        register_strategy("ddp")(STRATEGIES["ddp"])
    assert sorted(STRATEGIES) == sorted(strategy_names())


def test_bench_scaling_offers_every_registered_strategy() -> None:
    args = build_parser().parse_args(
        ["bench", "scaling", "--strategies", ",".join(strategy_names())]
    )
    assert tuple(args.strategies) == strategy_names()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "scaling", "--strategies", "horovod"])
