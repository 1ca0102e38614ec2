"""A GGUF source of an architecture llama.cpp reads and transformers does not (OLMo): the plan refuses
the required targets of a backend that converts a checkpoint (naming the target and why), leaves optional
ones out, and still plans the GGUF targets, which llama.cpp converts from the file itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w

from edgekit.errors import RecipeError
from edgekit.plan.make import make_plan
from edgekit.recipe.load import load_recipe
from tests.support.tiny_gguf import write_tiny_gguf


def _recipe(tmp_path: Path, targets: list[dict[str, object]], validation: bool = False) -> Path:
    source = write_tiny_gguf(tmp_path / "olmo.gguf", architecture="olmo")
    recipe = tmp_path / "recipe.toml"
    spec = {"model": {"source": str(source)}, "validation": {"enabled": validation}, "bench": {"enabled": False},
            "targets": targets}  # fmt: skip
    recipe.write_text(tomli_w.dumps(spec))
    return recipe


@pytest.mark.parametrize("backend, scheme", [("openvino", "INT8"), ("onnxruntime", "INT8")])
def test_a_required_target_whose_backend_cannot_read_the_architecture_is_refused_by_name(
    backend: str, scheme: str, tmp_path: Path
) -> None:
    recipe = load_recipe(_recipe(tmp_path, [{"backend": backend, "scheme": scheme}]))
    with pytest.raises(RecipeError) as refused:
        make_plan(recipe, cache_root=tmp_path / "cache", final=tmp_path / "dist" / "olmo")
    message = str(refused.value)
    assert "targets[0].backend" in message and f"target '{backend}-{scheme}'" in message
    assert "olmo" in message and "set required = false" in message


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
