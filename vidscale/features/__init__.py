"""`vidscale extract-features`: pooled trunk features of many videos from one trained run.

`pooled` turns any registered model into a feature extractor (its classifier replaced by the
identity), `listing` lists the videos and what a rerun must agree on, `parts` keeps the finished
videos as atomic chunk files so a killed run continues, and `extract` drives it all on one
process or on every rank of a torchrun launch.
"""
