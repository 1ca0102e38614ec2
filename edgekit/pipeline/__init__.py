"""The build: `build.build` runs plan → executor → verdicts → bundle files → report → manifest; `matrix` builds
several recipes as one DAG; `repair` rebuilds damaged cache entries; `levers` gathers the levers' figures."""
