"""Which warnings and infos a project wants to see: the [lint] settings select, ignore
and per_file_ignores (as ruff has them), checked and applied to one code and path at a
time. Errors are never silenced (silence.py applies this, with noqa comments)."""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .diagnostics import RULES, Severity

_CODE_PREFIX = re.compile(r"CTX[0-9]{0,3}")
SILENCEABLE = tuple(sorted(code for code, rule in RULES.items()
                            if rule.severity is not Severity.ERROR))


class RuleSettingError(ValueError):
    """A [lint] entry that is no code, or names only errors where they cannot go."""


@dataclass(frozen=True)
class RuleSelection:
    """[lint] select / ignore / per_file_ignores: codes or code prefixes (CTX5, CTX50)."""

    select: tuple[str, ...] = ()  # empty: every rule
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (glob, prefixes)

    def with_options(self, select: Iterable[str] | None, ignore: Iterable[str] | None
                     ) -> RuleSelection:
        """The command line's --select (replaces the setting) and --ignore (adds to it)."""
        return RuleSelection(
            tuple(check_prefixes(select, "--select: ", silenceable_only=False))
            if select is not None else self.select,
            self.ignore + tuple(check_prefixes(ignore or (), "--ignore: ")),
            self.per_file_ignores)

    def shows(self, code: str, relative_path: str | None) -> bool:
        rule = RULES.get(code)
        if rule is None or rule.severity is Severity.ERROR:
            return True
        if self.select and not code.startswith(self.select):
            return False
        if code.startswith(self.ignore) if self.ignore else False:
            return False
        if relative_path is not None:
            for pattern, prefixes in self.per_file_ignores:
                if code.startswith(prefixes) and _path_matches(pattern, relative_path):
                    return False
        return True


def _path_matches(pattern: str, relative_path: str) -> bool:
    """A project-relative POSIX path against a glob (`*` crosses folders, as in ruff): the
    path itself or one of its folders (`content/drafts` covers everything below it)."""
    if fnmatch.fnmatchcase(relative_path, pattern):
        return True
    parts = relative_path.split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[:n]), pattern) for n in range(1, len(parts)))


def check_prefixes(entries, where: str = "", silenceable_only: bool = True) -> list[str]:
    """Entries as code prefixes, each matching a known code (a warning or info where
    silenceable_only); RuleSettingError names the first that does not (where: what the
    message starts with)."""
    if isinstance(entries, str) or not all(isinstance(e, str) for e in entries):
        raise RuleSettingError(f"{where}must be a list of codes such as \"CTX511\" or "
                               "prefixes such as \"CTX5\"")
    out = []
    for entry in entries:
        entry = entry.strip().upper()
        if not _CODE_PREFIX.fullmatch(entry):
            raise RuleSettingError(f"{where}{entry!r} is not a code (CTX511) or a code "
                                   "prefix (CTX5)")
        pool = SILENCEABLE if silenceable_only else tuple(RULES)
        if not any(code.startswith(entry) for code in pool):
            if entry in RULES:
                raise RuleSettingError(f"{where}{entry} is an error; errors are fixed, "
                                       "not silenced")
            raise RuleSettingError(f"{where}{entry!r} matches no "
                                   f"{'warning or info' if silenceable_only else 'code'}"
                                   f"{did_you_mean(entry, pool)}")
        out.append(entry)
    return out


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """'; did you mean X?' for the closest known word, or nothing."""
    found = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {found[0]}?" if found else ""
