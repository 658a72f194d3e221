"""ctxfst: a make-style compiler, validator and linter for CtxFST knowledge bases.

From Python (docs/python.md): ctxfst.build(root), ctxfst.validate(paths),
ctxfst.open(root).query(text) and .ask(tenant, op, ...); failures are ctxfst.Error.
They are imported on first use, so `import ctxfst` stays cheap.
"""

from .version import __version__

TYPE_CHECKING = False  # (typing itself is not imported: `import ctxfst` stays cheap)

__all__ = ["Error", "Project", "__version__", "build", "open", "validate"]

if TYPE_CHECKING:
    from .api import Error, Project, build, open, validate


def __getattr__(name: str) -> object:
    if name in __all__:
        from . import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ctxfst' has no attribute {name!r}")
