"""The built-in demo datasets, real encoded files made from a seed.

- `videos`: the demo (`vidscale synth`): H.264 videos whose eight classes only temporal order
  tells apart, so TSM must learn them and TSN stays at chance.
- `multilabel`: the multi-label demo (`vidscale synth --multi-label`): three objects a video.
- `images`: the image demo set (JPEG files whose classes only texture tells apart).
- `render` draws what both video generators share; `writer` encodes and runs the pool.
"""
