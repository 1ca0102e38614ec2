"""The recipe: schema (pydantic), problems (in the words of a TOML file), targets (resolved against their
backends), checks (values that cannot all hold) and load, each importing only the ones before it."""
