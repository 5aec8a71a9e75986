"""`vidscale bench cluster`: efficiency against the number of nodes (2 to 16) on a cluster's
network on one machine, with stand-in ranks (TSM paper Table 3, Fig. 3c in miniature).

`standin` is the compute stand-in (the real parameters, waits instead of arithmetic),
`calibrate` what is measured on one process before the passes (the optimizer's part, the
stand-in's own work taken off its waits), `layer_times` the real backward timed layer by layer
(the stand-in's per-layer waits), `rank` one stand-in rank under torchrun; `config` says what
is measured, `measure` runs the sweep on `netlab.cluster` networks, `report` joins its rows
with the planner's (`planner.cluster_model`) into the JSON, the table and the plot.
"""
