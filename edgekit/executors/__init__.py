"""Executors walk a plan's DAG: `local` (this process, the default) and, with `edgekit[cluster]`, `ray`."""
