"""Run llama.cpp's quantizer (through the llama-cpp-python bindings) in a child process.

A child process keeps llama.cpp's C-level stderr (its per-tensor fallback warnings) out of the
user's terminal and in a log we parse, and a crash in C cannot take the build down with it.
Usage: python -m edgekit.backends.gguf.quantize_child SRC DST FTYPE_NAME NTHREAD [--allow-requantize]
"""

from __future__ import annotations

import ctypes
import sys


def main(argv: list[str]) -> int:
    import llama_cpp

    src, dst, ftype_name, nthread, *flags = argv
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype_name}")
    params.nthread = int(nthread)
    params.allow_requantize = "--allow-requantize" in flags  # a quantized source, dequantized to F16 first
    return int(llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
