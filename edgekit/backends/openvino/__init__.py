"""The OpenVINO backend: `build` exports with optimum-intel and compresses weights with NNCF; `engine`
runs the stateful IR on the box with OpenVINO's CPU plugin (no torch)."""

from edgekit.registry import BackendSpec

SPEC = BackendSpec(
    name="openvino",
    build="edgekit.backends.openvino.backend:OpenVINOBuild",
    engine="edgekit.backends.openvino.engine:open_engine",
    runtime_extra="runtime-openvino",
)
