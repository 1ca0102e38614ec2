"""Backends: one package each (`gguf`, `openvino`, `onnxruntime`), registered through the `edgekit.backends`
entry-point group exactly as a third-party backend would be (see `edgekit.registry`).

Each package holds its build side (`backend.py`: convert, quantize, what was written), its child-process
entry points, its default gates (`gates.py`) and its engine (`engine.py`: what runs on the box).
"""
