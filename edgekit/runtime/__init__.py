"""What runs on the edge box: verify, configure (threads, NUMA, mmap), load, generate, serve.

Nothing here imports torch, transformers or the build stages (`edgekit.stages`, `edgekit.backends`).
"""
