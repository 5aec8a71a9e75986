"""How ranks see each other: `failure` (a rank that fails, or is cut off, stops the others within
seconds instead of at the collective timeout), `heartbeats` (a silent peer told from a slow one),
`link_probe` (the link between nodes as gloo's all-reduce sees it: latency and bandwidth).
"""
