"""Video files as frames: what a codec gives and costs.

- `decode`: frames from a video file with PyAV, decoding only the GOPs the sampled frames need
  (`decode_segments` plans them, `video_meta` is what the stream index says first);
  `decode_baseline` is the keyframe-seeking decoder it replaced, kept as the bench's baseline.
- `flow`: dense optical flow (DIS, Farnebäck, TV-L1) for the temporal stream, stored as TSN does.
"""
