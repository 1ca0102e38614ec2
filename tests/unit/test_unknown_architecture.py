"""A GGUF source of an architecture a backend cannot read: the plan refuses its required targets, naming the
target and the reason, never an internal error; it leaves optional ones out and plans the rest.

OLMo is an architecture llama.cpp reads and transformers' GGUF loader does not: the backends that convert a
checkpoint (OpenVINO, ONNX Runtime, a third-party one that overrides nothing) refuse it, the GGUF backend takes
it. An architecture llama.cpp does not know either ("madeup") is refused by the GGUF backend too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w

from edgekit.backends.catalog import build_backend
from edgekit.errors import RecipeError
from edgekit.plan.make import make_plan
from edgekit.recipe.load import load_recipe
from edgekit.registry import specs
from tests.support.tiny_gguf import write_tiny_gguf

MINIMAL_BACKEND = """
from pathlib import Path

from edgekit.backends.base import BuildBackend, NoOptions
from edgekit.registry import BackendSpec

SPEC = BackendSpec(name="minimal", build="edgekit_minimal:Minimal", engine="edgekit_minimal:open_engine",
                   runtime_extra="runtime")


class Minimal(BuildBackend[NoOptions]):
    name, schemes, extra, options_model = "minimal", ("RAW",), "minimal", NoOptions

    def versions(self, env):
        return {"minimal": "1"}

    def convert(self, checkpoint, out_dir, env, progress, provenance):
        raise AssertionError("planning never converts")

    def quantize(self, inputs):
        raise AssertionError("planning never quantizes")
"""


@pytest.fixture
def minimal_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A third-party backend that declares only what it must, registered by an entry point as pip would."""
    site = tmp_path / "site"
    (site / "edgekit_minimal-0.1.dist-info").mkdir(parents=True)
    (site / "edgekit_minimal.py").write_text(MINIMAL_BACKEND)
    info = site / "edgekit_minimal-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: edgekit-minimal\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[edgekit.backends]\nminimal = edgekit_minimal:SPEC\n")
    monkeypatch.syspath_prepend(str(site))
    specs.cache_clear()
    build_backend.cache_clear()
    yield
    specs.cache_clear()
    build_backend.cache_clear()


def _recipe(tmp_path: Path, targets: list[dict[str, object]], validation: bool = False, arch: str = "olmo") -> Path:
    source = write_tiny_gguf(tmp_path / f"{arch}.gguf", architecture=arch)
    recipe = tmp_path / "recipe.toml"
    spec = {"model": {"source": str(source)}, "validation": {"enabled": validation}, "bench": {"enabled": False},
            "targets": targets}  # fmt: skip
    recipe.write_text(tomli_w.dumps(spec))
    return recipe


def _refusal(recipe_path: Path, tmp_path: Path) -> str:
    with pytest.raises(RecipeError) as refused:
        make_plan(load_recipe(recipe_path), cache_root=tmp_path / "cache", final=tmp_path / "dist" / "unknown")
    return str(refused.value)


@pytest.mark.parametrize("backend, scheme", [("openvino", "INT8"), ("onnxruntime", "INT8")])
def test_a_required_target_whose_backend_cannot_read_the_architecture_is_refused_by_name(
    backend: str, scheme: str, tmp_path: Path
) -> None:
    message = _refusal(_recipe(tmp_path, [{"backend": backend, "scheme": scheme}]), tmp_path)
    assert "targets[0].backend" in message and f"target '{backend}-{scheme}'" in message
    assert "transformers' GGUF loader does not read the olmo architecture" in message
    assert "set required = false" in message


def test_the_gguf_backend_refuses_an_architecture_llama_cpp_does_not_know(tmp_path: Path) -> None:
    message = _refusal(_recipe(tmp_path, [{"backend": "gguf", "scheme": "Q8_0"}], arch="madeup"), tmp_path)
    assert "target 'gguf-Q8_0'" in message and "llama.cpp cannot load the madeup GGUF" in message


@pytest.mark.usefixtures("minimal_backend")
def test_a_third_party_backend_that_overrides_nothing_refuses_it_by_name(tmp_path: Path) -> None:
    message = _refusal(_recipe(tmp_path, [{"backend": "minimal", "scheme": "RAW"}]), tmp_path)
    assert "target 'minimal-RAW'" in message and "the minimal backend cannot build olmo" in message
    assert "transformers' GGUF loader does not read the olmo architecture" in message


def test_an_optional_one_is_left_out_with_its_reason_and_the_gguf_target_is_planned(tmp_path: Path) -> None:
    targets = [{"backend": "gguf", "scheme": "Q8_0"}, {"backend": "openvino", "scheme": "INT8", "required": False}]
    plan = make_plan(load_recipe(_recipe(tmp_path, targets)), cache_root=tmp_path / "cache",
                     final=tmp_path / "dist" / "olmo")  # fmt: skip
    assert [t.name for t in plan.bundle.targets] == ["gguf-Q8_0"]
    (skipped,) = plan.bundle.skipped
    assert skipped.name == "openvino-INT8" and "olmo" in skipped.reason


def test_with_validation_on_the_reference_is_refused_with_the_way_out(tmp_path: Path) -> None:
    recipe = load_recipe(_recipe(tmp_path, [{"backend": "gguf", "scheme": "Q8_0"}], validation=True))
    with pytest.raises(RecipeError) as refused:
        make_plan(recipe, cache_root=tmp_path / "cache", final=tmp_path / "dist" / "olmo")
    assert "the reference cannot be built" in str(refused.value) and "enabled = false" in str(refused.value)
