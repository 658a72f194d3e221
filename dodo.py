"""doit entry point: the task graph lives in the ctxfst package."""

from ctxfst.build.tasks import *  # noqa: F401,F403  (doit collects task_* names)
