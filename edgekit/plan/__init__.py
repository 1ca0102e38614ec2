"""A recipe resolved into a plan: a DAG of tasks (`tasks`), each keyed by its inputs (`keys`).

`make_plan(recipe, ...)` resolves it once (`build`): source hashes, the eval data, tool versions.
"""

from edgekit.plan.build import Plan, dependency_order, make_plan, output_path

__all__ = ["Plan", "dependency_order", "make_plan", "output_path"]
