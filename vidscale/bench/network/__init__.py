"""`vidscale bench network`: one node against two across a real, shaped link (TSM paper Fig. 3c).

`config` says what is measured, `measure` runs the baseline and the two-node passes at each
rate (`vidscale.netlab`), `hook_cost` what each gradient hook computes on one process (the
planner's input), `report` joins them with the planner's predictions
(`vidscale.planner.link_model`) into the JSON, the table and the plot.
"""
