"""What changes a training run's sizes or its BatchNorm between epochs: `adaptive_batch` (AAVG's
batch adaptation, Alg. 1 lines 13-21: new sizes between epochs, the loader kept), `phase_switch`
(a timeline phase's BatchNorm mode: sub-batch or synchronised BN, Wu et al. §3.3) and
`precise_bn` (the BN statistics recomputed at the base shape before evaluation).
"""
