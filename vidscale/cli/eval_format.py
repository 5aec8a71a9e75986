"""`vidscale eval` for a person: the reports of `evaluate_run` and `evaluate_two_stream` as
lines and a table (`--json` prints the reports themselves)."""

from __future__ import annotations

from typing import Any


def format_eval(result: dict[str, Any]) -> str:
    """One row per checkpoint, then the mean ± std over them, the videos counted and the views;
    a multi-label run's table leads with mAP (and its top-1/top-5 are hit@1/hit@5)."""
    if "map_mean" in result:
        return _format_multi_label_eval(result)
    lines = [f"{'checkpoint':20s} {'top-1':>7s} {'top-5':>7s} {'loss':>8s} {'videos':>7s}"]
    for row in result["checkpoints"]:
        lines.append(
            f"{row['checkpoint']:20s} {row['top1']:7.2f} {row['top5']:7.2f} "
            f"{row['loss']:8.4f} {row['count']:7d}"
        )
    lines.append(
        f"top-1 {result['top1_mean']:.2f} ± {result['top1_std']:.2f}, "
        f"top-5 {result['top5_mean']:.2f} ± {result['top5_std']:.2f} "
        f"over {len(result['checkpoints'])} checkpoint(s)"
    )
    lines.append(_videos_line(result["videos"], result["listed"], result["unreadable"]))
    lines.append(_views_line(result["views"], f"{result['views']['average']} averaged"))
    lines.append(_precision_line(result))
    return "\n".join(lines + _damaged_lines(result.get("damaged", [])))


def _format_multi_label_eval(result: dict[str, Any]) -> str:
    lines = [f"{'checkpoint':20s} {'mAP':>7s} {'hit@1':>7s} {'loss':>8s} {'videos':>7s}"]
    for row in result["checkpoints"]:
        lines.append(
            f"{row['checkpoint']:20s} {row['map']:7.4f} {row['top1']:7.2f} "
            f"{row['loss']:8.4f} {row['count']:7d}"
        )
    lines.append(
        f"mAP {result['map_mean']:.4f} ± {result['map_std']:.4f} (chance "
        f"{result['map_chance']:.4f}), hit@1 {result['top1_mean']:.2f} ± "
        f"{result['top1_std']:.2f} over {len(result['checkpoints'])} checkpoint(s)"
    )
    lines.append(_videos_line(result["videos"], result["listed"], result["unreadable"]))
    how = f"sigmoid scores, {result['views'].get('aggregate', 'mean')} over views"
    lines.append(_views_line(result["views"], how))
    lines.append(_precision_line(result))
    return "\n".join(lines + _damaged_lines(result.get("damaged", [])))


def _precision_line(result: dict[str, Any]) -> str:
    return f"scores computed in {result['precision']} (--precision)"


def _damaged_lines(damaged: list[dict[str, str]]) -> list[str]:
    """One line per checkpoint left out of the mean because it does not load."""
    return [f"damaged checkpoint, left out: {d['path']}: {d['reason']}" for d in damaged]


def _views_line(v: dict[str, Any], how: str) -> str:
    return (
        f"views: {v['num_clips']} clip(s) x {v['num_crops']} crop(s) of {v['crop_size']} px, "
        f"short side {v['short_side']} px, {v['frames']} frames ({v['sampling']}), {how}"
    )


def format_two_stream(result: dict[str, Any]) -> str:
    """Each stream's top-1 and the fused top-1/top-5 on the videos both streams hold."""
    weights = result["weights"]
    lines = [f"{'stream':8s} {'weight':>6s} {'top-1':>7s}  checkpoint"]
    for name, top1 in result["stream_top1"].items():
        lines.append(
            f"{name:8s} {weights[name]:6g} {top1:7.2f}  {result['checkpoints'].get(name, '')}"
        )
    lines.append(
        f"{'fused':8s} {'':6s} {result['top1']:7.2f}  top-5 {result['top5']:.2f}, "
        f"{result['gain_over_best_stream']:+.2f} over the best stream"
    )
    if "map" in result:  # multi-label runs: top-1/top-5 above are hit@1/hit@5
        per_stream = ", ".join(f"{k} {v:.4f}" for k, v in result["stream_map"].items())
        lines.append(f"mAP: fused {result['map']:.4f}; {per_stream} (top-1 above: hit@1)")
    lines.append(f"{result['videos']} validation videos in both streams")
    lines.append(_precision_line(result))
    if result["unreadable"]:
        lines.append(f"{len(result['unreadable'])} unreadable video(s) left out (see --json)")
    if result["only_in"]:
        lines.append(f"in one stream only, left out: {_counts(result['only_in'])}")
    return "\n".join(lines)


def _videos_line(videos: int, listed: int, unreadable: list[dict[str, str]]) -> str:
    line = f"{videos} of {listed} validation videos"
    if unreadable:
        shown = ", ".join(u["path"] for u in unreadable[:3])
        more = f" and {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
        line += f"; unreadable, left out: {shown}{more}"
    return line


def _counts(only_in: Any) -> str:
    if isinstance(only_in, dict):
        return ", ".join(
            f"{k}: {len(v) if isinstance(v, list | tuple) else v}" for k, v in only_in.items()
        )
    return str(only_in)
