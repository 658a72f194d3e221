"""Old home of the doit wiring (see ctxfst/build/__init__.py)."""

from ..pipeline.tasks import dodo_namespace

__all__ = ["dodo_namespace"]
