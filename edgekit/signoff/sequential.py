"""`[validation] decide = true`: evaluate in looks, up to `max_tokens`, until every gate is decided.

The windows are cut into `looks` nearly equal blocks. After each block the artifact is scored on every
window so far and each gate judged; evaluation stops at the first look where no gate is inconclusive,
or after the last block. Looking repeatedly and stopping when the answer suits would make 95% intervals
lie, so each look's intervals are at level 1 − α/K for K planned looks (a Bonferroni split of α over
the looks): by the union bound the chance that any look's interval misses its true value is at most
α, whatever the correlation between looks, so the interval at the look where evaluation stops keeps
its 95% guarantee. This is the simplest valid group-sequential design (Jennison & Turnbull, *Group
Sequential Methods with Applications to Clinical Trials*, 2000, §2.2; more efficient boundaries such as
Pocock's or O'Brien–Fleming's spend α unevenly but need the joint distribution of the looks).
"""

from __future__ import annotations

from edgekit.observe.progress import Progress
from edgekit.signoff.gates import Check, Gates, Summary, Verdict, judge_artifact
from edgekit.signoff.scoring import (
    Evaluation,
    LogitsRunner,
    Reference,
    WindowScores,
    score_tasks,
    score_windows,
    summarise,
)

METHOD = "group-sequential, Bonferroni split of alpha over the planned looks (Jennison & Turnbull 2000, §2.2)"


def look_bounds(windows: int, looks: int) -> list[int]:
    """How many windows have been scored after each look: nearly equal blocks, at least one window each."""
    if windows < 1:
        raise ValueError("a sequential evaluation needs at least one window")
    looks = max(1, min(looks, windows))
    return [windows * (k + 1) // looks for k in range(looks)]


def look_level(alpha: float, looks: int) -> float:
    return 1 - alpha / looks


def undecided(checks: list[Check]) -> list[str]:
    return [c.metric for c in checks if c.verdict == Verdict.INCONCLUSIVE]


def evaluate_until_decided(
    runner: LogitsRunner,
    ref: Reference,
    gates: Gates,
    looks: int,
    alpha: float,
    bootstrap: tuple[int, int, int],
    progress: Progress,
    label: str,
) -> tuple[Evaluation, Summary]:
    """Score look by look; return the evaluation and summary at the look where evaluation stopped.

    `bootstrap`: (resamples, block tokens, seed). The summary carries `sequential`: the looks taken,
    how many windows they covered and the interval level.
    """
    bounds = look_bounds(ref.windows.count, looks)
    level = look_level(alpha, len(bounds))
    tasks = score_tasks(runner, ref, progress, label)
    scores = WindowScores([], [])
    done, history = 0, []
    count = ref.windows.count
    described = f"validate  {label}: {count} windows in up to {len(bounds)} looks"
    with progress.task(described, total=count, unit="windows") as shown:
        for look, end in enumerate(bounds, 1):
            shown.update(f"{described}, look {look}")
            score_windows(runner, ref, range(done, end), shown, scores)
            done = end
            evaluation = scores.evaluation(tasks)
            summary = summarise(evaluation, ref, *bootstrap, level=level)
            open_gates = undecided(judge_artifact(summary, gates).checks)
            history.append({"look": look, "windows": end, "undecided": open_gates})
            if not open_gates:
                break
            progress.log(f"validate  {label}: look {look} of {len(bounds)} leaves {', '.join(open_gates)} undecided")
    summary.sequential = {
        "method": METHOD,
        "looks": len(history),
        "max_looks": len(bounds),
        "level": level,
        "windows": done,
        "of_windows": ref.windows.count,
        "scored_tokens": done * ref.windows.scored_per_window,
        "decided": not history[-1]["undecided"],
        "history": history,
    }
    return evaluation, summary
