"""What one long-cycle shape of a multigrid schedule trains with (PySlowFast's rules): its
BatchNorm, its short cycle of (crop, batch), its scale jitter and its largest temporal stride."""

from __future__ import annotations

from vidscale.schedules.multigrid_spec import BNMode, MultigridSpec


def bn_config(per_device_batch: int, bn_base_size: int, num_devices: int) -> tuple[BNMode, int]:
    """BatchNorm for a per-device batch: (mode, sub-batch splits or sync devices).

    PySlowFast `update_long_cycle`: factor = per-device batch / BN_BASE_SIZE; > 1: sub-batch
    BN with int(factor) splits; < 1: sync BN over int(1 / factor) devices; = 1: plain BN.
    Where PySlowFast's numbers cannot run, they are reduced to ones that can: splits to the
    largest divisor of the batch (the batch is viewed as splits x groups), sync devices to the
    largest divisor of `num_devices` (sync groups tile the devices; one device has nothing to
    sync with); a count of 1 is reported as plain BN (a 1-split sub-BN computes exactly BN).
    """
    factor = float(per_device_batch) / bn_base_size
    if factor > 1:
        want = int(factor)
        splits = max(d for d in range(1, want + 1) if per_device_batch % d == 0)
        return ("sub_batchnorm", splits) if splits > 1 else ("batchnorm", 1)
    if factor < 1:
        want = int(1.0 / factor)
        group = max(d for d in range(1, min(want, num_devices) + 1) if num_devices % d == 0)
        return ("sync_batchnorm", group) if group > 1 else ("batchnorm", 1)
    return "batchnorm", 1


def short_cycle_entries(
    spec: MultigridSpec, crop: int, per_device_batch: int
) -> tuple[tuple[int, int], ...]:
    """(crop, per-device batch) cycled per iteration at long-cycle crop `crop`
    (ShortCycleBatchSampler and kinetics.py): crops int(round(f·S0)) then `crop`, batches
    B·round((crop / (f·S0))²) then B. One entry, (crop, B), when the short cycle is off."""
    if not spec.short_cycle:
        return ((crop, per_device_batch),)
    entries: list[tuple[int, int]] = []
    for f in spec.short_cycle_factors:
        multiple = round((float(crop) / (f * spec.crop)) ** 2)
        if multiple < 1:
            raise ValueError(
                f"short-cycle crop {f} x {spec.crop} is larger than the long-cycle crop {crop}: "
                "its batch rounds to 0"
            )
        entries.append((round(f * spec.crop), per_device_batch * multiple))
    entries.append((crop, per_device_batch))
    return tuple(entries)


def jitter_range(jitter_scales: tuple[int, int], crop: int, base_crop: int) -> tuple[int, int]:
    """Short-side scale jitter of a clip cropped to `crop` (PySlowFast kinetics.py with
    MULTIGRID.DEFAULT_S set): the lower bound scaled by crop / base crop and rounded
    (`int(round(float(min) * crop / DEFAULT_S))`), the upper bound unchanged. A smaller crop
    then covers the same fraction of the frame at the smallest scale."""
    low, high = jitter_scales
    return round(float(low) * crop / base_crop), high


def max_sampling_rate(spec: MultigridSpec, frames: int) -> int:
    """Largest temporal stride of a clip with `frames` frames; the stride is drawn uniformly
    from [sampling_rate, this] (PySlowFast `get_random_sampling_rate`). Long cycle:
    sampling_rate x (T0 // T) (`LONG_CYCLE_SAMPLING_RATE`), so a clip can span as much time as
    a base clip; otherwise `long_cycle_sampling_rate` if set, else the fixed stride."""
    if spec.long_cycle:
        return spec.sampling_rate * (spec.frames // frames)
    return spec.long_cycle_sampling_rate or spec.sampling_rate
