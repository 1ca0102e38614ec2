"""The llama.cpp GGUF backend: `build` converts with llama.cpp's own converter and quantizes with its
quantizer; `engine` runs GGUF files on the box with llama-cpp-python (no torch)."""

from edgekit.registry import BackendSpec

SPEC = BackendSpec(
    name="gguf",
    build="edgekit.backends.gguf.backend:GGUFBuild",
    engine="edgekit.backends.gguf.engine:open_engine",
    runtime_extra="runtime",
)
