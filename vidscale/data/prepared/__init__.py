"""The prepared format: every video decoded once into JPEG frame shards plus an index.

- `prepare`: `vidscale prepare`, writing the shards and their manifest (atomically); `encode`
  decodes a video once into what it stores (resized JPEG frames, their flow).
- `shards`: the format itself (tar shards of per-video frames, the index, reading a video back).
- `shard_dataset`: datasets over shards, random access (map-style) and streaming (iterable).
"""
