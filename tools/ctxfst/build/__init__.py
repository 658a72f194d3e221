"""Kept for dodo.py files written before the doit wiring moved to ctxfst.pipeline:
`from ctxfst.build.tasks import dodo_namespace` still works. Nothing else lives here (a
folder named build is skipped by linters' default excludes)."""
