"""Training in fault-tolerant replica groups on TorchFT (`vidscale train-ft`, the `ft` extra):
`training` (the loop: quorum, steps, a failed group's healing), `replica` (one process's replica:
model, optimizer, data position, the LR rule while a group is away), `rounds` (local steps and
K-step averaging across groups: AAVG or TorchFT's LocalSGD), `epochs` (each epoch's end: one
group's evaluation, the run's standard checkpoint, metrics line and summary; a whole-job
restart from that checkpoint)."""
