"""Optimizers: `factory` turns the `optim` config into one (SGD, Adam, LARS, LAMB); `lars` and
`lamb` share `layerwise`'s per-tensor loop; `param_groups` keeps weight decay off BN and biases.
"""
