"""The analytic scaling model and `vidscale plan`.

- `scaling_model` (step time on N nodes x G GPUs), `allreduce` (ring cost), `overlap` (what hides
  under backward), `clusters` (hardware presets); the per-layer costs backward follows are
  `models.costs`, the one counter of what a model costs.
- `capacity` (how long, how many GPUs, which model scales better), `measured` (inputs from a
  `bench scaling` JSON), `report`, `durations`; `paper_scaling` and `paper_figures` hold the
  model to the TSM paper's Table 3, Fig. 3c and Fig. 6; `link_model` predicts P nodes across a
  measured link from one process's step (`vidscale bench network`), `cluster_model` N nodes on
  one switch as gloo's ring runs the all-reduces (`bench cluster`).
"""
