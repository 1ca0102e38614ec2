"""The ONNX Runtime backend: `build` exports with optimum and quantizes with ONNX Runtime's dynamic INT8;
`engine` runs the decoder with an InferenceSession on the box (no torch, no transformers)."""

from edgekit.registry import BackendSpec

SPEC = BackendSpec(
    name="onnxruntime",
    build="edgekit.backends.onnxruntime.backend:ONNXRuntimeBuild",
    engine="edgekit.backends.onnxruntime.engine:open_engine",
    runtime_extra="runtime-onnx",
)
