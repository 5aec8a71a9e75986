"""`auto` fast path: real probes of a tiny model, the cache, explicit settings and recorded
decisions that skip the probe, and 2 real ranks agreeing (the rule itself:
test_rule.py)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.env import DistEnv
from vidscale.fastpath.cache import ENV_VAR, cache_file
from vidscale.fastpath.probe import (
    FastPathDecision,
    ProbeSettings,
    ProbeShape,
    decide,
    probe,
)
from vidscale.fastpath.rule import choose
from vidscale.fastpath.settings import Candidate, candidates
from vidscale.run.record import RunRecord

CPU = torch.device("cpu")
# 4 frames, not 2: torch 2.13's bf16 conv3d backward gives NaN or inf weight gradients for a
# (3, 3, 3) convolution over depth 2 on an AVX512-BF16 CPU (intermittently, more often on one
# thread), and the probe rightly leaves such a setting out (docs/benchmarks.md, "bf16 kernels
# that give wrong gradients"); these tests time settings that train.
SHAPE = ProbeShape(batch=2, channels=3, frames=4, crop=16, num_classes=4)
# Every candidate in every round (3 rounds alone could not leave fp32: all else would stop).
QUICK = ProbeSettings(warmup=1, repeats=3, settle=0, drop_hopeless=False)


class TinyClipNet(nn.Module):
    """(N, 3, T, H, W) -> (N, 4): a 3D conv (channels-last-3d applies), dropout (the probe must
    not draw from the run's RNG), a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3, padding=1)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(8, 4)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.conv(clips).relu().mean((2, 3, 4))))


SLOW_SIDE_S = 0.25


class SlowerOnOneSide(TinyClipNet):
    """Sleeps `SLOW_SIDE_S` per forward in channels-last, or in the default layout on rank 0
    when `ranks_differ`: a setting that loses (or, on rank 0, wins) every round, for certain,
    even on a busy 2-core machine (30 ms once lost a round to scheduling noise there)."""

    ranks_differ = False

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        cl = self.conv.weight.is_contiguous(memory_format=torch.channels_last_3d)
        slow_side = not cl if self.ranks_differ and os.environ.get("RANK") == "0" else cl
        if slow_side:
            time.sleep(SLOW_SIDE_S)
        return super().forward(clips)


class SlowerOnRankOne(SlowerOnOneSide):
    ranks_differ = True


def never_built() -> nn.Module:
    raise AssertionError("the model was built: something was probed")


def decide_tiny(
    cache: Path | None,
    *,
    amp: str = "auto",
    channels_last: str = "auto",
    enabled: bool = True,
    checkpoint: RunRecord | None = None,
    batch: int = 2,
    build: Callable[[], nn.Module] = TinyClipNet,
    log: Callable[[str], None] = lambda _: None,
    settings: ProbeSettings = QUICK,
) -> FastPathDecision:
    return decide(
        CPU,
        enabled=enabled,
        amp=amp,
        channels_last=channels_last,
        build=build,
        shape=replace(SHAPE, batch=batch),
        key_fields={"model": "tiny"},
        cache=cache,
        checkpoint=checkpoint,
        is_main=True,
        settings=settings,
        log=log,
    )


# -- real probes -----------------------------------------------------------------------------------


def test_a_real_probe_times_every_candidate_and_leaves_the_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    to_time = candidates(CPU, bf16=None, channels_last=None)
    timed = probe(TinyClipNet, to_time, device=CPU, shape=SHAPE, settings=QUICK)
    samples = timed.samples
    assert torch.equal(torch.get_rng_state(), before) and timed.dropped == {}
    assert list(samples) == [c.label for c in to_time]
    assert all(len(s) == QUICK.repeats and min(s) > 0 for s in samples.values())
    choice = choose(samples)
    decision = FastPathDecision.measured_by(choice, samples=samples, shape=SHAPE)
    assert decision.candidate.label == choice.chosen and decision.shape == (2, 3, 4, 16, 16)
    assert decision.rounds == QUICK.repeats and decision.reference == "fp32"
    assert choose(decision.samples).chosen == decision.candidate.label  # the record replays
    assert FastPathDecision.from_record(json.loads(json.dumps(decision.record()))) == decision
    assert "auto chose" in decision.describe() and "fp32" in decision.describe()


@pytest.mark.slow
def test_a_setting_that_loses_its_first_round_is_timed_no_more(tmp_path: Path) -> None:
    """5 rounds on one process need 5 wins: channels-last loses round 1 and the probe stops."""
    five = ProbeSettings(warmup=1, repeats=5, settle=0)
    cl_auto = candidates(CPU, bf16=False, channels_last=None)
    timed = probe(SlowerOnOneSide, cl_auto, device=CPU, shape=SHAPE, settings=five)
    assert {k: len(v) for k, v in timed.samples.items()} == {"fp32": 1}
    assert timed.dropped["fp32+cl"].endswith(
        "stopped after 1 of 5 rounds: not faster than fp32 in 1/1, needs 5"
    )
    decision = decide_tiny(tmp_path / "cache.json", amp="off", build=SlowerOnOneSide, settings=five)
    assert decision.candidate.label == "fp32" and decision.rounds == 1
    assert list(decision.samples) == ["fp32"] and list(decision.dropped) == ["fp32+cl"]
    described = decision.describe()
    assert "every other setting was ruled out in its first rounds; fp32+cl 0." in described
    assert "stopped after 1 of 5" in described
    assert decision.seconds is not None and f" in {decision.seconds:.0f} s" in described
    cached = decide_tiny(tmp_path / "cache.json", amp="off", build=never_built, settings=five)
    assert cached.source == "cache" and cached.dropped == decision.dropped


@pytest.mark.slow
def test_the_cache_is_hit_by_the_same_key_only(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "fast_path.json"
    first = decide_tiny(path)
    assert first.source == "probe" and first.rounds == QUICK.repeats
    (key,) = json.loads(path.read_text())
    for part in ("model=tiny", "clips=2x3x4x16x16", f"threads={torch.get_num_threads()}"):
        assert part in key.split(";")
    assert f"torch={torch.__version__}" in key and "device=cpu:" in key
    again = decide_tiny(path, build=never_built)
    assert again.source == "cache"
    assert (again.candidate, again.measured) == (first.candidate, first.measured)
    other = decide_tiny(path, batch=3)  # another per-process batch: measured anew
    assert other.source == "probe" and len(json.loads(path.read_text())) == 2


@pytest.mark.slow
def test_an_unreadable_cache_is_reported_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "fast_path.json"
    path.write_text("{ not json")
    said: list[str] = []
    decision = decide_tiny(path, log=said.append)
    assert decision.source == "probe"
    assert any("unreadable" in s for s in said)
    assert len(json.loads(path.read_text())) == 1


def test_where_the_cache_lives() -> None:
    assert cache_file("off") is None
    assert cache_file("/tmp/x.json") == Path("/tmp/x.json")
    assert cache_file("auto", environ={ENV_VAR: "/data/c.json"}) == Path("/data/c.json")
    assert cache_file("auto", environ={ENV_VAR: "off"}) is None
    assert cache_file("auto", environ={"XDG_CACHE_HOME": "/xdg"}) == Path(
        "/xdg/vidscale/fast_path.json"
    )
    assert cache_file("auto", environ={}) == Path("~/.cache/vidscale/fast_path.json").expanduser()


def test_explicit_settings_and_the_master_switch_skip_the_probe(tmp_path: Path) -> None:
    path = tmp_path / "fast_path.json"
    explicit = decide_tiny(path, amp="bf16", channels_last="off", build=never_built)
    assert (explicit.source, explicit.bf16, explicit.channels_last) == ("explicit", True, False)
    off = decide_tiny(path, enabled=False, build=never_built)
    assert (off.source, off.candidate.label) == ("off", "fp32")
    assert not path.exists()


@pytest.mark.parametrize("has_units", [True, False], ids=["bf16-units", "avx2-only"])
def test_a_resumed_run_takes_its_recorded_decision(
    tmp_path: Path, bf16_units: Callable[[bool], None], has_units: bool
) -> None:
    """One rule on every device, whichever axes are explicit: an explicit axis of this start
    wins, an "auto" axis takes the record. A recorded bf16 stays bf16 where the device has no
    bf16 units (emulated: the same arithmetic, slower), and the start says so."""
    bf16_units(has_units)
    path = tmp_path / "fast_path.json"
    recorded = FastPathDecision(True, True, "probe", reason="bf16+cl 1.40x fp32")
    state = RunRecord(fast_path=recorded)
    starts = {  # (train.amp, train.channels_last) -> the setting the resumed run takes
        ("auto", "auto"): Candidate(True, True),
        ("auto", "off"): Candidate(True, False),
        ("auto", "on"): Candidate(True, True),
        ("off", "auto"): Candidate(False, True),
        ("bf16", "auto"): Candidate(True, True),
    }
    for (amp, cl), expected in starts.items():
        resumed = decide_tiny(path, amp=amp, channels_last=cl, checkpoint=state, build=never_built)
        assert (resumed.source, resumed.candidate) == ("checkpoint", expected), (amp, cl)
        assert "1.40x" in resumed.reason
        emulated = expected.bf16 and not has_units
        assert ("bf16 autocast is emulated" in resumed.reason) is emulated, resumed.reason
        assert ("train.amp=off" in resumed.describe()) is emulated
    # Both axes explicit: the record does not matter.
    both = decide_tiny(path, amp="off", channels_last="off", checkpoint=state, build=never_built)
    assert (both.source, both.candidate) == ("explicit", Candidate(False, False))
    # A checkpoint from before decisions were recorded: the rule it was trained with.
    old = decide_tiny(path, checkpoint=RunRecord(), build=never_built)
    assert (old.source, old.candidate) == ("hardware", Candidate(has_units, has_units))
    assert not path.exists()


@pytest.mark.parametrize("has_units", [True, False], ids=["bf16-units", "avx2-only"])
@pytest.mark.parametrize("resumed", [False, True], ids=["fresh", "resumed"])
def test_explicit_bf16_says_it_is_emulated_where_the_device_has_no_bf16_units(
    tmp_path: Path, bf16_units: Callable[[bool], None], has_units: bool, resumed: bool
) -> None:
    """Both axes explicit, fresh or resumed: bf16 without bf16 units says so, as every other way
    of starting in bf16 does; fp32 never does."""
    bf16_units(has_units)
    path = tmp_path / "fast_path.json"
    state = RunRecord(fast_path=FastPathDecision(False, False, "probe")) if resumed else None
    for amp, cl in (("bf16", "on"), ("bf16", "off"), ("off", "on"), ("off", "off")):
        decision = decide_tiny(path, amp=amp, channels_last=cl, checkpoint=state, build=never_built)
        assert decision.source == "explicit"
        emulated = amp == "bf16" and not has_units
        assert ("bf16 autocast is emulated" in decision.describe()) is emulated, (amp, cl)
        assert ("train.amp=off switches" in decision.describe()) is emulated, (amp, cl)
    assert not path.exists()


def test_the_emulation_note_is_this_devices_not_the_records(
    tmp_path: Path, bf16_units: Callable[[bool], None]
) -> None:
    """A run started in bf16 on a device without bf16 units, resumed on one with them (and back):
    the note follows the device the run resumes on, and is never said twice."""
    path = tmp_path / "fast_path.json"
    bf16_units(False)
    first = decide_tiny(path, amp="bf16", channels_last="on", build=never_built)
    assert first.reason.count("bf16 autocast is emulated") == 1
    bf16_units(True)
    moved = decide_tiny(path, checkpoint=RunRecord(fast_path=first), build=never_built)
    assert moved.candidate == Candidate(True, True) and "emulated" not in moved.reason
    bf16_units(False)
    back = decide_tiny(path, checkpoint=RunRecord(fast_path=moved), build=never_built)
    assert back.reason.count("bf16 autocast is emulated") == 1, back.reason
    again = decide_tiny(path, checkpoint=RunRecord(fast_path=first), build=never_built)
    assert again.reason.count("bf16 autocast is emulated") == 1, again.reason


@pytest.mark.slow
def test_a_probed_bf16_says_it_is_emulated_where_the_device_has_no_bf16_units(
    tmp_path: Path, bf16_units: Callable[[bool], None]
) -> None:
    """train.amp=bf16 with the layout at "auto": the probe times the two layouts in bf16, and
    the decision, measured or read back from the cache, says bf16 is emulated here."""
    bf16_units(False)
    path = tmp_path / "fast_path.json"
    probed = decide_tiny(path, amp="bf16")
    cached = decide_tiny(path, amp="bf16", build=never_built)
    assert (probed.source, cached.source) == ("probe", "cache")
    for decision in (probed, cached):
        assert decision.bf16 and decision.reason.count("bf16 autocast is emulated") == 1
        assert "bf16 autocast is emulated" in decision.describe()


def test_a_fresh_run_with_one_candidate_is_not_probed(
    tmp_path: Path, bf16_units: Callable[[bool], None]
) -> None:
    """Without bf16 units, amp=auto with a fixed layout leaves one setting: nothing to time."""
    bf16_units(False)
    path = tmp_path / "fast_path.json"
    only = decide_tiny(path, channels_last="on", build=never_built)
    assert (only.source, only.candidate) == ("explicit", Candidate(False, True))
    assert "the only setting" in only.reason
    assert not path.exists()


# -- 2 real ranks ------------------------------------------------------------------------------------


def decide_on_rank(env: DistEnv, main_cache: str, other_cache: str) -> dict[str, Any]:
    """Rank 0 reads and writes `main_cache`; the others are given `other_cache`, which only a
    rank that decided alone would touch."""
    return decide(
        env.device,
        enabled=True,
        amp="auto",
        channels_last="auto",
        build=TinyClipNet,
        shape=SHAPE,
        key_fields={"model": "tiny", "processes": env.local_world_size},
        cache=Path(main_cache if env.is_main else other_cache),
        checkpoint=None,
        is_main=env.is_main,
        settings=QUICK,
    ).record()


@pytest.mark.slow
def test_two_ranks_probe_together_and_use_one_decision(tmp_path: Path) -> None:
    main, other = tmp_path / "main.json", tmp_path / "other.json"
    r0, r1 = run_ranks(decide_on_rank, 2, str(main), str(other), timeout=120)
    assert r0 == r1 and r0["source"] == "probe"
    assert r0["rounds"] == 2 * QUICK.repeats  # both ranks' samples, pooled
    assert len(json.loads(main.read_text())) == 1 and not other.exists()
    c0, c1 = run_ranks(decide_on_rank, 2, str(main), str(other), timeout=120)
    assert c0 == c1 and c0["source"] == "cache"  # rank 0's hit, broadcast
    assert (c0["bf16"], c0["channels_last"]) == (r0["bf16"], r0["channels_last"])
    assert not other.exists()


def decide_slower(env: DistEnv, build: str) -> dict[str, Any]:
    return decide(
        env.device,
        enabled=True,
        amp="off",
        channels_last="auto",
        build={"cl": SlowerOnOneSide, "rank 1": SlowerOnRankOne}[build],
        shape=SHAPE,
        key_fields={"model": build, "processes": env.local_world_size},
        cache=None,
        checkpoint=None,
        is_main=env.is_main,
        settings=ProbeSettings(warmup=1, repeats=5, settle=0),
    ).record()


@pytest.mark.slow
def test_two_ranks_stop_timing_what_their_rounds_rule_out_of_the_pooled_choice() -> None:
    # 10 pooled rounds need 9 wins: each rank stops channels-last at its second lost round.
    r0, r1 = run_ranks(decide_slower, 2, "cl", timeout=120)
    assert r0 == r1 and r0["samples"].keys() == {"fp32"} and r0["rounds"] == 4
    assert "stopped after 2 of 10 rounds" in r0["dropped"]["fp32+cl"]
    # Rank 0 finds channels-last faster in all its 5 rounds, rank 1 rules it out after 2: it
    # cannot reach 9 of 10 in the pool, so it is out on both, and fp32's 5 + 2 rounds decide.
    d0, d1 = run_ranks(decide_slower, 2, "rank 1", timeout=120)
    assert d0 == d1 and (d0["bf16"], d0["channels_last"]) == (False, False)
    assert d0["samples"].keys() == {"fp32"} and d0["rounds"] == 7
    assert "fp32+cl" in d0["dropped"]
