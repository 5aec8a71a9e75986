"""Surviving failures within one run: `resilience` (stop signals checkpoint and exit for a
restart, the divergence guard skips and counts bad steps) and `watchdog` (a hung step,
evaluation or checkpoint ends the rank with its stacks written)."""
