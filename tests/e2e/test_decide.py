"""The default recipe decides on a text it was not tuned on: every default gate of every artifact is decided.

The text is "A Scandal in Bohemia" (public domain, tests/fixtures/README.md), about 12,300 tokens: the
default max_tokens (8,192) fits. The noise floor is left out (it gates nothing) and the bench is off, so
this is the reference and four validations of the default model.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import build
from edgekit.recipe.load import DEFAULT_RECIPE, load_recipe
from edgekit.store.cache import StageCache

TEXT = Path(__file__).resolve().parents[1] / "fixtures" / "scandal_in_bohemia.txt"


def test_default_gates_are_decided_on_a_second_text(stage_cache_root: Path, tmp_path: Path) -> None:
    recipe = DEFAULT_RECIPE.read_text()
    recipe = recipe.replace('text = "pkg://edgekit/data/botchan.txt"', f'text = "{TEXT}"\nnoise_floor_dtype = "none"')
    recipe = recipe.replace("[bench]", "[bench]\nenabled = false")
    path = tmp_path / "recipe.toml"
    path.write_text(recipe)
    result = build(load_recipe(path), cache=StageCache(stage_cache_root), progress=SilentProgress(),
                   out_dir=tmp_path / "out")  # fmt: skip
    report = json.loads((result.bundle / "report.json").read_text())
    assert report["signoff"]["eval_data"]["sha256"] and report["reference"]["tokens"] == 8192
    undecided = [(a["name"], c["metric"], c["value"], c["ci95"]) for a in report["artifacts"] for c in a["checks"]
                 if c["verdict"] == "inconclusive"]  # fmt: skip
    assert undecided == []
    assert all(a["checks"] for a in report["artifacts"])  # every artifact is gated
    for artifact in report["artifacts"]:  # task figures are reported, not gated
        assert "cloze" in artifact["tasks"] and not any(c["gate"] == "task_drop_max" for c in artifact["checks"])
