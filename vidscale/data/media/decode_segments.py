"""Decoding segments: which GOPs a set of sparse frames needs, which packets to decode, where to
stop.

The segments are built from the packet index that `decode.probe` caches (`VideoMeta`: the frames' pts in
display order and the keyframes), so it costs no I/O:

- `segments_for` groups the wanted frames by the GOP that holds them (the last keyframe at or
  before each). A `Segment` is one entry into the stream: seek to its keyframe, send packets in
  decode order until every one of its targets has been sent, then drain the decoder. Packets after
  the last target are never read, and GOPs without a target are never entered. Two GOPs are
  decoded in one pass only where nothing lies between them (the next keyframe follows the last
  target at once), since a pass through frames no target needs would decode their references.
- `SegmentDecoder` decodes them. Per packet it asks FFmpeg to skip the picture (`skip_frame =
  NONREF`) when it is neither a target nor a reference picture, for the codecs where a
  non-reference picture provably leaves no trace in later ones (`SKIP_NONREF_CODECS`); references
  and targets are decoded in full, so every frame the decoder outputs is bit-identical to a full
  sequential decode. Only targets are converted to RGB; other output frames are counted and
  dropped.

A packet's pts says which frame it codes (frame i has the i-th smallest pts), and so does a
decoded frame's pts, whatever the codec's reordering or frame threading delay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from vidscale.data.media.video_meta import DecodeStats, VideoMeta

# Codecs (FFmpeg decoder names) whose AVDISCARD_NONREF drops only pictures that no later picture
# can reference, so skipping them changes no other frame:
# - h264: a picture with nal_ref_idc = 0 is never a reference (H.264 §7.4.1); FFmpeg drops its
#   slice NAL units and still parses the parameter sets and SEI in the packet.
# - mpeg1video, mpeg2video, mpeg4 (part 2): B-pictures / B-VOPs are never references; FFmpeg
#   skips exactly the B-pictures.
# Not listed, so decoded in full (the segments still skip GOPs and stops early): VP8/VP9 (a frame
# that refreshes no reference slot can still update the probability contexts or segmentation map
# that later frames start from), HEVC (a sub-layer non-reference picture may be a reference for
# a higher temporal sub-layer), and anything else.
SKIP_NONREF_CODECS = frozenset({"h264", "mpeg1video", "mpeg2video", "mpeg4"})

# MPEG-4 part 2 with "packed B-frames" (DivX/XviD in AVI) stores a P- and a B-VOP in one packet,
# and FFmpeg decodes the B-VOP when the next packet arrives, under that packet's setting. No
# B-VOP can come before the first packet holding two VOPs, so skipping stops there.
_VOP_START = b"\x00\x00\x01\xb6"


@dataclass(frozen=True)
class Segment:
    """One entry into the stream: seek to frame `key` (a keyframe), decode until every frame
    in `targets` (ascending, at or after `key`) has been sent to the decoder."""

    key: int
    targets: tuple[int, ...]


def segments_for(keyframes: np.ndarray, wanted: Iterable[int]) -> tuple[Segment, ...]:
    """The segments that decode the `wanted` frames, in stream order.

    `keyframes`: ascending frame indices that start a GOP, beginning at 0 (`VideoMeta`). A GOP
    is entered once, at its keyframe, for all the wanted frames it holds. A GOP whose keyframe is
    at most the frame right after the previous segment's last target joins that segment:
    decoding on costs nothing a seek would save.
    """
    segments: list[Segment] = []
    for target in sorted({int(i) for i in wanted}):
        key = int(keyframes[np.searchsorted(keyframes, target, side="right") - 1])
        if segments and key <= segments[-1].targets[-1] + 1:
            last = segments[-1]
            segments[-1] = Segment(last.key, (*last.targets, target))
        else:
            segments.append(Segment(key, (target,)))
    return tuple(segments)


class SegmentDecoder:
    """Decodes segments from an open container, keeping the wanted frames.

    `convert` turns a decoded target frame into its array; it is called once per wanted frame.
    Frames are identified by pts, so a frame is kept only when decoded correctly: after a seek to
    keyframe k, frames shown before k (an open GOP's leading pictures, whose references precede
    the seek point) are ignored.
    """

    def __init__(
        self,
        container: Any,
        stream: Any,
        meta: VideoMeta,
        stats: DecodeStats,
        convert: Callable[[Any], np.ndarray],
    ) -> None:
        self.container = container
        self.stream = stream
        self.ctx = stream.codec_context
        self.meta = meta
        self.stats = stats
        self.convert = convert
        self.index = meta.index_of_pts
        self.skip_nonref = self.ctx.name in SKIP_NONREF_CODECS
        self.check_packed = self.ctx.name == "mpeg4"
        self.skip_mode = ""
        self.entry = 0  # first frame decodable since the last seek
        self.want: set[int] = set()
        self.got: dict[int, np.ndarray] = {}

    def run(self, segments: Sequence[Segment]) -> dict[int, np.ndarray]:
        """Frames of every segment's targets that could be decoded, by index.

        A segment whose seek lands past its keyframe (a broken index) or which ends with
        targets still missing is decoded again from frame 0, the full sequential decode.
        """
        self.want = {t for s in segments for t in s.targets}
        retry: list[int] = []
        for segment in segments:
            self._run(segment)
            if segment.key > 0:
                retry.extend(t for t in segment.targets if t not in self.got)
        if retry:
            self._run(Segment(0, tuple(retry)))
        return self.got

    def _run(self, segment: Segment) -> None:
        pending = {t for t in segment.targets if t not in self.got}
        if not pending:
            return
        packets = self._enter(segment.key)
        if packets is None:  # no seek lands at or before the keyframe
            return
        for packet in packets:
            if packet.size == 0:  # PyAV's end-of-stream marker
                break
            index = self.index.get(packet.pts)  # None: a packet the index leaves out
            if index is None or index not in pending:
                self._decode(packet, full=False)
                continue
            self._decode(packet, full=True)
            pending.discard(index)
            if not pending:
                break
        self._decode(None, full=True)  # drain: frames the decoder still holds (reordering, threads)

    def _enter(self, key: int) -> Iterator[Any] | None:
        """Seek so that decoding starts at keyframe `key` or before it; the packets from there.

        Seeking by pts lands right where the container indexes keyframes by pts (MP4, Matroska),
        but past the keyframe where it indexes them by decode time (AVI): then by dts.
        """
        for timestamp in self._seek_points(key):
            # backward=True, any_frame=False: the last keyframe at or before the timestamp.
            self.container.seek(timestamp, stream=self.stream, backward=True)
            self.stats.seeks += 1
            self._keep_reorder_depth()
            packets = self.container.demux(self.stream)
            head = []
            index = None
            for packet in packets:
                head.append(packet)
                index = self.index.get(packet.pts)
                if index is not None or packet.size == 0:
                    break
            if index is None or index <= key:
                self.entry = key if index is None else index
                return chain(head, packets)
        return None

    def _seek_points(self, key: int) -> list[int]:
        points = [int(self.meta.pts[key])]
        key_dts = self.meta.key_dts
        if len(key_dts) == len(self.meta.keyframes):
            dts = int(key_dts[np.searchsorted(self.meta.keyframes, key)])
            if dts < points[0]:
                points.append(dts)
        return points

    def _keep_reorder_depth(self) -> None:
        # A flush must not make the decoder drop frames it believes arrive out of order: keep
        # the reordering delay the probe found.
        depth = self.meta.reorder_depth
        if depth and hasattr(self.ctx, "reorder_depth") and self.ctx.reorder_depth < depth:
            self.ctx.reorder_depth = depth

    def _decode(self, packet: Any, *, full: bool) -> None:
        """Send `packet` (None: drain) and keep the wanted frames that come out."""
        if self.check_packed and packet is not None and bytes(packet).count(_VOP_START) > 1:
            self.skip_nonref = self.check_packed = False
        mode = "NONREF" if self.skip_nonref and not full else "DEFAULT"
        if mode != self.skip_mode:  # set per packet: FFmpeg reads it when the packet is sent
            self.ctx.skip_frame = mode
            self.skip_mode = mode
        for frame in self.ctx.decode(packet):
            self.stats.frames_decoded += 1
            index = self.index.get(frame.pts)
            if (
                index is not None
                and index >= self.entry
                and index in self.want
                and index not in self.got
            ):
                self.got[index] = self.convert(frame)
