"""doit entry point: the task graph lives in the ctxfst package (ctxfst.build.tasks)."""

from ctxfst.build.tasks import dodo_namespace

globals().update(dodo_namespace())
