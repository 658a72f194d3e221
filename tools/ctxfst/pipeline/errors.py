"""How a build stage says it could not do its work."""

from __future__ import annotations


class BuildFailed(Exception):
    """A stage could not produce its outputs; the message says why."""
