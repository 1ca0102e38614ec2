"""Benchmarks on the box: the measurement plan, its worker processes, the bandwidth probe, statistics,
and what runtime.toml (and `edgekit tune`'s runtime.local.toml) derive from them."""
