"""A recipe resolved into a plan: a DAG of tasks (`tasks`), each keyed by its inputs (`keys`).

`make.make_plan(recipe, ...)` resolves it once: preflight, source hashes, the eval data, tool versions.
"""
