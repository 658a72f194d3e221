"""doit entry point: the task graph lives in the ctxfst package (ctxfst.pipeline.tasks)."""

from ctxfst.pipeline.tasks import dodo_namespace

globals().update(dodo_namespace())
