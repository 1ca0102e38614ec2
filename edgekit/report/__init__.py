"""The sign-off report: a model (`model.build_report`, report.json) and renderers that depend only on it
(`render`: report.md and report.html through `view`, with `plots`)."""
