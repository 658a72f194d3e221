"""One build of a project in this process: what its stages share.

The doit namespace makes one BuildRun (pipeline/tasks.py) and hands it to every stage
function and up-to-date check; a stage run beside the others in a forked process takes
its copy along. Nothing of a build is kept in module globals.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from ..diagnostics import Diagnostic, render_text, summarize
from ..files import Walk, file_stamp
from .beside import Beside


@dataclass
class BuildRun:
    config: Config
    quiet: bool = False  # `ctxfst build -q`: findings and failures only
    running: bool = False  # inside doit's run of the tasks (begin() .. end())
    # The inputs as inputs_state found them while doit loaded the tasks (the lstat of
    # each regular file), and those the run took as its own (begin): its validation
    # looks at each input through them, not again (at 10,000 files, each pass of stat
    # calls cost 30 ms here).
    loaded_stats: dict[str, os.stat_result] = field(default_factory=dict)
    stats: dict[str, os.stat_result] = field(default_factory=dict)
    # and each one's stamp as a unit keeps it (pipeline.incremental.unit_stamp; None
    # for a file changed within a clock tick of the stat), made beside its identity
    loaded_stamps: dict[str, str | None] = field(default_factory=dict)
    stamps: dict[str, str | None] = field(default_factory=dict)
    # The project's walk (scan_project), taken once: while doit loads the tasks, it is
    # the walk whose stats those are; every stage reads the inputs it found.
    _walk: Walk | None = field(default=None, repr=False)
    _inputs: list | None = field(default=None, repr=False)  # its validation Inputs
    # The validated knowledge base the stages share (validate, compile and facts each
    # need it): (input identities, Checked, whether it was made inside the run).
    validated: tuple[tuple, Any, bool] | None = None
    _input_digests: Any = field(default=None, repr=False)
    beside: Beside = field(default_factory=Beside)  # its stages forked beside the others
    held_locks: list = field(default_factory=list)  # the build lock, once this run took it

    def begin(self) -> None:
        """doit's run of the tasks starts: its stages share one validated snapshot of
        the inputs, as validate saw them, without looking at every input again (an input
        changed since is seen by the next build: validate's saved state is the one taken
        before it ran). The stat results taken for doit's state are the run's view of
        the inputs."""
        self.running = True
        self.stats, self.loaded_stats = self.loaded_stats, {}
        self.stamps, self.loaded_stamps = self.loaded_stamps, {}
        self.validated = None

    def end(self) -> None:
        self.running = False
        self.stats, self.stamps = {}, {}
        self._walk = self._inputs = None

    def walk(self) -> Walk:
        """The project's inputs and what its walk refused, as this run found them."""
        if self._walk is None:
            from ..files import scan_project

            self._walk = scan_project(self.config)
        return self._walk

    def inputs(self, refused: list[Diagnostic] | None = None) -> list:
        """The walk's files as validation Inputs (made once: 10,000 of them cost 50 ms);
        what the walk refused is added to refused."""
        if self._inputs is None:
            from ..validation import project_inputs

            self._inputs = project_inputs(self.config, walk=self.walk())
        if refused is not None:
            refused.extend(self.walk().problems)
        return list(self._inputs)

    def stat(self, path) -> os.stat_result | None:
        """A file's stat (links followed): as this run took it for a regular file, else
        asked now; None when it is gone."""
        known = self.stats.get(os.fspath(path))
        if known is not None:
            return known
        try:
            return os.stat(path)
        except OSError:
            return None

    def identity(self, path, info: os.stat_result | None = None
                 ) -> tuple[int, int, int, int] | None:
        """A file's file_stamp (size, mtime, ctime, inode, as git's index keeps them);
        None when it is gone. info: its stat, when taken."""
        if info is None:
            info = self.stat(path)
            if info is None:
                return None
        return file_stamp(info)

    def identities(self, inputs, refused) -> tuple:
        found = []
        for item in inputs:
            identity = self.identity(item.source.fs_path)
            if identity is None:
                return ()  # a file gone since the walk: never reuse
            found.append((item.source.path, *identity))
        return (tuple(found), tuple(refused))

    def input_digests(self):
        """The build's input digests (DigestCache of Config.build_input_digests), loaded
        once per run."""
        if self._input_digests is None:
            from ..artifacts.reader import DigestCache
            from ..files import RACY_NS

            # (entries are checked against each file's identity when used)
            self._input_digests = DigestCache(self.config.build_input_digests, RACY_NS)
        return self._input_digests

    def write_findings(self, shown: list[Diagnostic], files: int) -> None:
        """Diagnostics the project's settings leave shown, with a summary unless quiet."""
        sys.stdout.write(render_text(shown, None if self.quiet else summarize(shown, files)))
