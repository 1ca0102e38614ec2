"""Installed package versions, for provenance and cache keys."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def dist_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, or None when it is not installed."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None
