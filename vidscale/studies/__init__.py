"""Runs that launch runs (`vidscale study NAME`), all on one skeleton (`skeleton`: design the
runs, check the data fits, train each one (`runs`), collect, report): `sweep` (batch-size, with
`sweep_report`), `aavg`, `multigrid`, `two_stream`, `multilabel`. Their settings shared by every
study (`--epochs`, `--nproc`, `--margin`) are declared once in `options`, whose fields the
command's flags are derived from.
"""
