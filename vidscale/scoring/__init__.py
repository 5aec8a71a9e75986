"""How a model's scores of videos are computed, one way for every command that scores: the
trainer's evaluation, `vidscale eval`, `predict`, feature extraction.

- `evaluate` (a model over a loader: views aggregated per video, top-1/top-5, loss; each
  readable video once over the ranks), `average_precision` (mAP for multi-label data and the
  views' aggregation rules), `precision` (the arithmetic of every score: fp32 unless asked).
"""
