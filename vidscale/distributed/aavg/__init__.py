"""AAVG (Cong et al.): K-step model averaging with an adaptive batch size. `strategy` (the
strategy the loop calls: local steps, then every K steps or at an epoch's end an averaging of
parameters, BatchNorm statistics and, merged, the optimizer's state), `averaging` (the flat
buffers an averaging all-reduces, kept between rounds), `config` (`aavg.*` of a run), `theory`
(the paper's convergence bound and its terms).
"""
