"""Project discovery and the [tool.ctxfst] / ctxfst.toml settings.

Settings may come from a stranger: every configured path must resolve (links included)
inside the project root, and every error is located in the settings file
(`path:line:column: error CTX8xx: message`).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from .document.ids import DEFAULT_TENANT, NAME_PATTERN, TENANT_PATTERN
from .files import display_path, inside
from .rule_selection import RuleSelection, RuleSettingError, check_prefixes

CONFIG_FILE = "ctxfst.toml"
TOOL_DIR = ".ctxfst"
DEFAULT_MODEL = "minilm"  # the bundled offline all-MiniLM-L6-v2 (see compile/embed.py)
NAMED_MODELS = ("minilm", "use-multilingual", "e5-small")  # bundled: see compile/embed.py
# A Hugging Face Hub id, `org/name`: never a path (no '..', no leading '/' or '.').
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*/[A-Za-z0-9][A-Za-z0-9._-]*")
# A model behind an OpenAI-compatible embeddings endpoint: openai-compatible:MODEL@URL.
REMOTE_MODEL = re.compile(r"openai-compatible:([A-Za-z0-9][A-Za-z0-9._:/-]*)@"
                          r"(https?://([A-Za-z0-9.-]+|\[[0-9a-fA-F:]+\])(:[0-9]{1,5})?(/[^\s@?#]*)?)")
# Hosts, besides this machine, that settings may send text to for embedding: the user's
# environment names them (a stranger's KB must not send its builder's queries away).
EMBEDDING_HOSTS_ENV = "CTXFST_EMBEDDING_HOSTS"
DEFAULT_EXTRA_EDGES = ("**/*.edges.json", "**/*.edges.yaml", "**/*.edges.yml")
MAX_SETTINGS_BYTES = 8 * 1024 * 1024
_FACTS_KNOWN = {"tenants", "complete", "extractors", "fallback_limit", "fallback_scan"}
# Folders of .ctxfst/ whose entries are written: none may link out of the project.
_TOOL_FOLDERS = ("", "cache", "facts")


class ConfigError(Exception):
    """A configuration that cannot be used. With a path it is located there, and has a
    stable code (CTX8xx, docs/rules.md)."""

    def __init__(self, message: str, path: Path | None = None, line: int = 1,
                 column: int = 1, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.path, self.line, self.column, self.code = (
            message, path, line, column, code)

    def __str__(self) -> str:
        if self.path is not None:
            return (f"{display_path(Path(self.path))}:{self.line}:{self.column}: error "
                    f"{self.code}: {self.message}")
        return f"{self.message} ({self.code})" if self.code else self.message

    def render(self) -> str:
        """The line the command line prints."""
        return str(self) if self.path is not None else f"ctxfst: error: {self}"


# Locating keys in TOML text. tomllib gives no positions, so the text (already parsed
# by tomllib, hence valid) is scanned once more when an error needs a line.

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR = re.compile(r"[^,\]}\r\n#]+")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\",
            "e": "\x1b"}


class _KeyScanner:
    """Offsets of every key of a TOML text: key path -> (key offset, value offset).
    Array items are keyed by their index."""

    def __init__(self, text: str) -> None:
        self.text, self.n = text, len(text)
        self.found: dict[tuple, tuple[int, int]] = {}

    def skip(self, i: int, newlines: bool = True) -> int:
        text = self.text
        while i < self.n:
            c = text[i]
            if c in " \t" or (newlines and c in "\r\n"):
                i += 1
            elif c == "#":
                end = text.find("\n", i)
                i = self.n if end < 0 else end
            else:
                break
        return i

    def basic(self, i: int) -> tuple[str, int]:
        """A one-line "..." string from its opening quote: (decoded, offset after it)."""
        text, out, j = self.text, [], i + 1
        while j < self.n and text[j] != '"':
            if text[j] == "\\" and j + 1 < self.n:
                code = text[j + 1]
                width = {"u": 4, "U": 8}.get(code)
                if width:
                    out.append(chr(int(text[j + 2:j + 2 + width], 16)))
                    j += 2 + width
                    continue
                out.append(_ESCAPES.get(code, code))
                j += 2
                continue
            out.append(text[j])
            j += 1
        return "".join(out), j + 1

    def key(self, i: int) -> tuple[tuple[str, ...], int]:
        parts: list[str] = []
        text = self.text
        while True:
            i = self.skip(i, newlines=False)
            if i < self.n and text[i] == '"':
                part, i = self.basic(i)
            elif i < self.n and text[i] == "'":
                end = text.index("'", i + 1)
                part, i = text[i + 1:end], end + 1
            else:
                match = _BARE_KEY.match(text, i)
                if not match:
                    return tuple(parts), i
                part, i = match.group(), match.end()
            parts.append(part)
            i = self.skip(i, newlines=False)
            if i < self.n and text[i] == ".":
                i += 1
                continue
            return tuple(parts), i

    def value(self, i: int, path: tuple) -> int:
        text = self.text
        for quote in ('"""', "'''"):
            if text.startswith(quote, i):
                j = i + 3
                while not text.startswith(quote, j):
                    j += 2 if quote == '"""' and text[j] == "\\" else 1
                run = 3  # up to two more quotes end the content, not the string
                while run < 5 and j + run < self.n and text[j + run] == quote[0]:
                    run += 1
                return j + run
        c = text[i] if i < self.n else ""
        if c == '"':
            return self.basic(i)[1]
        if c == "'":
            return text.index("'", i + 1) + 1
        if c == "[":
            i, index = i + 1, 0
            while True:
                i = self.skip(i)
                if i >= self.n or text[i] == "]":
                    return i + 1
                self.found.setdefault(path + (index,), (i, i))
                i = self.skip(self.value(i, path + (index,)))
                index += 1
                if i < self.n and text[i] == ",":
                    i += 1
        if c == "{":
            i += 1
            while True:
                i = self.skip(i)
                if i >= self.n or text[i] == "}":
                    return i + 1
                i = self.pair(i, path)
                i = self.skip(i)
                if i < self.n and text[i] == ",":
                    i += 1
        match = _SCALAR.match(text, i)
        return match.end() if match else i + 1

    def pair(self, i: int, table: tuple) -> int:
        start = i
        keys, i = self.key(i)
        if not keys:
            end = self.text.find("\n", i)
            return self.n if end < 0 else end
        i = self.skip(i, newlines=False)
        if i < self.n and self.text[i] == "=":
            i = self.skip(i + 1, newlines=False)
        for depth in range(1, len(keys)):  # a dotted key defines its tables
            self.found.setdefault(table + keys[:depth], (start, start))
        self.found.setdefault(table + keys, (start, i))
        return self.value(i, table + keys)

    def scan(self) -> dict[tuple, tuple[int, int]]:
        i, table = 0, ()
        while True:
            i = self.skip(i)
            if i >= self.n:
                return self.found
            if self.text[i] == "[":
                i += 2 if self.text.startswith("[[", i) else 1
                start = self.skip(i, newlines=False)
                table, i = self.key(start)
                self.found.setdefault(table, (start, start))
                end = self.text.find("\n", i)
                i = self.n if end < 0 else end
            else:
                i = self.pair(i, table)


def locate(text: str, keys: tuple, at_key: bool = False) -> tuple[int, int]:
    """(line, column) of the value of a key path in TOML text (of the key itself with
    at_key), or of the nearest enclosing key or table the text names; (1, 1) otherwise."""
    try:
        found = _KeyScanner(text).scan()
    except (ValueError, IndexError):  # never an error of its own: a rough place will do
        return 1, 1
    for depth in range(len(keys), 0, -1):
        if keys[:depth] in found:
            key_at, value_at = found[keys[:depth]]
            offset = value_at if depth == len(keys) and not at_key else key_at
            starts = [0] + [m.end() for m in re.finditer("\n", text)]
            line = bisect.bisect_right(starts, offset)
            return line, offset - starts[line - 1] + 1
    return 1, 1


@dataclass(frozen=True)
class _Settings:
    """The ctxfst settings table, the file it came from and where in it they sit."""

    data: dict
    file: Path | None = None
    text: str = ""
    prefix: tuple = ()  # ("tool", "ctxfst") in pyproject.toml

    def error(self, code: str, message: str, *keys, at_key: bool = False) -> ConfigError:
        if self.file is None:
            return ConfigError(message, code=code)
        line, column = locate(self.text, self.prefix + keys, at_key)
        return ConfigError(message, self.file, line, column, code)


@dataclass(frozen=True)
class BuildSettings:
    """Settings that shape the artifacts; each stage hashes the ones it depends on."""

    embedding_model: str = DEFAULT_MODEL
    similar_top_k: int = 5
    similar_min_score: float = 0.35
    # Above this many entities SIMILAR edges come from an approximate index (HNSW) whose
    # candidates are scored exactly; at or below it, from the exact kNN.
    similar_exact_max: int = 100_000
    extra_edges: tuple[str, ...] = DEFAULT_EXTRA_EDGES
    embed_batch_size: int = 32
    # false: chunks.json and entity-profiles.json are not made (their Parquet twins are)
    json_exports: bool = True
    # [facts]: folder -> tenant, entity type -> keys declared complete ("namespace/key"),
    # extra extractors ("module:factory"), and the bounds of the lexical fallback.
    facts_tenants: tuple[tuple[str, str], ...] = ()
    facts_complete: tuple[tuple[str, tuple[str, ...]], ...] = ()
    facts_extractors: tuple[str, ...] = ()
    facts_fallback_limit: int = 5
    facts_fallback_scan: int = 10_000

    def tenant_for(self, relative_path: str) -> str:
        """The tenant of a project-relative path by the longest matching folder setting."""
        best, tenant = -1, DEFAULT_TENANT
        for folder, name in self.facts_tenants:
            if (relative_path == folder or relative_path.startswith(folder + "/")) and \
                    len(folder) > best:
                best, tenant = len(folder), name
        return tenant

    def complete_keys(self, entity_type: str) -> tuple[str, ...]:
        return dict(self.facts_complete).get(entity_type, ())

    def digest(self, *keys: str) -> str:
        """A stable hash of the named settings (all of them when none are named)."""
        data = asdict(self)
        chosen = {key: data[key] for key in (keys or sorted(data))}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Config:
    root: Path
    content_dir: Path
    skills_dir: Path
    build_dir: Path
    config_file: Path | None
    build: BuildSettings = field(default_factory=BuildSettings)
    # Where models run: it does not shape the artifacts (not a BuildSettings), so a
    # change re-embeds nothing; the cache keeps a text's vector once it is made.
    embedding_device: str = "auto"
    # Where the build embeds its cache misses: "local" (this process) or "ray" (a Ray
    # Data pipeline, ray_concurrency actors; 0: one a GPU, or a CPU, of the cluster).
    # The artifacts are the same either way, so neither is a BuildSetting.
    engine: str = "local"
    ray_concurrency: int = 0
    # [lint]: which warnings and infos are shown (rule_selection.py); the artifacts never
    # change.
    lint: RuleSelection = field(default_factory=RuleSelection)
    # report = true: the build also writes build/report.html (a view of the artifacts)
    report: bool = False

    @property
    def source_dirs(self) -> list[Path]:
        return [self.content_dir, self.skills_dir]

    # Every path ctxfst keeps in .ctxfst/ (checked for links out by _check_tool_folder).
    @property
    def tool_dir(self) -> Path:
        return self.root / TOOL_DIR

    @property
    def cache_dir(self) -> Path:
        """Caches that outlive `doit clean` (embeddings): beside the build, not in it."""
        return self.tool_dir / "cache"

    @property
    def doit_state(self) -> Path:
        """doit's record of what it ran (pipeline/doit_state.py)."""
        return self.tool_dir / "doit.db"

    @property
    def build_lock(self) -> Path:
        return self.tool_dir / "build.lock"

    @property
    def facts_ledger(self) -> Path:
        """The facts of the last published build (docs/facts.md): outlives `doit clean`."""
        return self.tool_dir / "facts"

    @property
    def world_state(self) -> Path:
        """The runtime's default world-state file (docs/runtime.md)."""
        return self.tool_dir / "world-state.json"

    @property
    def runtime_edges(self) -> Path:
        """Edges the agent loop recorded, merged into the next build's graph."""
        return self.tool_dir / "runtime.edges.json"

    @property
    def unit_store(self) -> Path:
        """The compilation units (pipeline/units.py)."""
        return self.cache_dir / "units.sqlite"

    @property
    def input_digests(self) -> Path:
        """sha256 of the sources by file identity (size, mtime, inode, ctime), like git's
        index: the readers' freshness check (freshness.py)."""
        return self.cache_dir / "inputs.json"

    @property
    def build_input_digests(self) -> Path:
        """input_digests of the build's inputs other than documents (skills, extra edges,
        settings, content_path passages): a document's digest is in its unit, so an edit
        does not rewrite a list of every document (0.56 s at 100,000)."""
        return self.cache_dir / "build-inputs.json"


def _settings_in(directory: Path) -> _Settings | None:
    dedicated = directory / CONFIG_FILE
    if dedicated.is_file():
        _refuse_link_out(directory, dedicated)
        text = _read_settings_text(dedicated)
        return _Settings(_parse_toml(dedicated, text), dedicated, text)
    pyproject = directory / "pyproject.toml"
    if pyproject.is_file():
        text = _read_settings_text(pyproject)
        data = _parse_toml(pyproject, text)
        tool = data.get("tool", {})
        if isinstance(tool, dict) and "ctxfst" in tool:
            _refuse_link_out(directory, pyproject)  # (another tool's pyproject may link)
            found = _Settings(tool["ctxfst"], pyproject, text, ("tool", "ctxfst"))
            if not isinstance(found.data, dict):
                raise found.error("CTX803", "[tool.ctxfst] must be a table")
            return found
    return None


def _refuse_link_out(directory: Path, path: Path) -> None:
    if not inside(directory.resolve(), path):
        raise ConfigError(f"{path.name} is a link to {path.resolve()}, outside the project; "
                          "its settings are not used", path, code="CTX804")


def _read_settings_text(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SETTINGS_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read the settings: {error.strerror or error}", path,
                          code="CTX801") from None
    if len(data) > MAX_SETTINGS_BYTES:
        raise ConfigError(f"settings file larger than {MAX_SETTINGS_BYTES:,} bytes", path,
                          code="CTX801")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError("settings file is not valid UTF-8", path, line, code="CTX801") \
            from None


def _parse_toml(path: Path, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        place = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
        line, column = (int(place.group(1)), int(place.group(2))) if place else (
            text.count("\n") + 1 if "end of document" in message else 1, 1)
        message = message[:place.start()] if place else message
        raise ConfigError(f"TOML syntax error: {message}", path, line, column,
                          "CTX801") from None


def embedding_host_allowed(host: str) -> bool:
    """This machine (localhost, 127.0.0.0/8, ::1), or a host the user's environment
    allows (CTXFST_EMBEDDING_HOSTS, comma-separated)."""
    import ipaddress

    bare = host.strip("[]").lower()
    if bare == "localhost":
        return True
    try:
        if ipaddress.ip_address(bare).is_loopback:
            return True
    except ValueError:
        pass
    allowed = {h.strip().lower() for h in os.environ.get(EMBEDDING_HOSTS_ENV, "").split(",")}
    return bare in allowed - {""}


def config_from_text(root: Path, file: Path, text: str) -> Config | None:
    """The project in root as a settings file's text would make it (the hook reads the
    staged ctxfst.toml or pyproject.toml); None for a pyproject.toml without ctxfst."""
    data = _parse_toml(file, text)
    prefix: tuple = ()
    if file.name == "pyproject.toml":
        tool = data.get("tool", {})
        if not isinstance(tool, dict) or "ctxfst" not in tool:
            return None
        data, prefix = tool["ctxfst"], ("tool", "ctxfst")
    if not isinstance(data, dict):
        raise _Settings({}, file, text, prefix).error("CTX803", "the ctxfst settings must "
                                                      "be a table")
    return load_config(root, data, file, text, prefix)


def find_project(start: Path) -> Config | None:
    """The nearest enclosing ctxfst project of start (a file or directory), if any."""
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    for candidate in (directory, *directory.parents):
        found = _settings_in(candidate)
        if found is not None:
            return load_config(candidate, found.data, found.file, found.text, found.prefix)
    return None


def setting_error(root: Path, code: str, message: str, *keys) -> ConfigError:
    """A ConfigError located at a setting of the project in root (for checks that need
    the sources, made after loading)."""
    found = _settings_in(root)
    return (found or _Settings({})).error(code, message, *keys)


def check_inside(root: Path, path: Path, what: str) -> Path:
    """A path the project chose (a default, a setting), resolved; it must stay inside
    the project, links followed."""
    try:
        resolved = path.resolve()
    except (OSError, ValueError) as error:
        raise ConfigError(f"{what} {path}: not a usable path ({error})", code="CTX803") \
            from None
    if not resolved.is_relative_to(root):
        raise ConfigError(f"{what} {path} resolves to {resolved}, outside the project root "
                          f"{root}", code="CTX804")
    return resolved


def typed_path(config: Config | None, path: Path, what: str, cwd: Path | None = None
               ) -> Path:
    """A path the user typed on the command line, resolved. It is theirs: it may lie
    outside the project. One written inside the project must stay inside once links
    are followed (a link in a stranger's checkout must not carry it out), and what a
    command writes there never replaces a source: the content or skills folder, a file
    in them, or the settings file (nor a folder holding them)."""
    written = Path(os.path.abspath(cwd / path if cwd and not path.is_absolute() else path))
    try:
        resolved = written.resolve()
    except (OSError, ValueError, RuntimeError) as error:
        raise ConfigError(f"{what} {path}: not a usable path ({error})", code="CTX803") \
            from None
    if config is None:
        return resolved
    if written.is_relative_to(config.root) and not resolved.is_relative_to(config.root):
        raise ConfigError(f"{what} {path} is inside the project but resolves to {resolved}, "
                          "outside it (through a link)", code="CTX804")
    protected = [*config.source_dirs, *([config.config_file] if config.config_file else [])]
    for source in protected:
        source = source.resolve()
        if resolved == source or resolved.is_relative_to(source) \
                or source.is_relative_to(resolved):
            raise ConfigError(f"{what} {path} would write over the sources "
                              f"({os.path.relpath(source, config.root)}); choose a path "
                              "outside them", code="CTX810")
    return resolved


_KNOWN = {"content_dir", "skills_dir", "build_dir", "embedding_model", "similar_top_k",
          "similar_min_score", "extra_edges", "embed_batch_size", "embedding_device", "facts",
          "lint", "report", "engine", "ray_concurrency", "similar_exact_max",
          "json_exports"}
ENGINES = ("local", "ray")
_LINT_KNOWN = {"select", "ignore", "per_file_ignores"}
# auto: a CUDA GPU, else Apple's MPS, else the CPU (compile/embed.py resolves it)
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]{1,2})?")


def _tenant_folder(root: Path, folder, settings: _Settings, where: tuple) -> str:
    """A [facts] tenants key as the project-relative folder it names: it must be a
    folder of the project, spelt exactly (a typo or a wrong case would leave its
    documents in tenant `default`, where another tenant's queries would find them)."""
    raw = folder.strip() if isinstance(folder, str) else ""
    key = where + (folder,)
    if not raw or raw.strip("/") in ("", "."):
        raise settings.error("CTX803", f"tenant folder {folder!r} must name a folder of the "
                             "project", *key, at_key=True)
    path = _inside_root(root, raw, settings, f"tenant folder {folder!r}", key, at_key=True)
    if not path.is_dir() or not _spelt_exactly(root, path):
        raise settings.error("CTX806", f"tenant folder {folder!r} is no folder of the project "
                             "(folders are matched exactly, case included)", *key,
                             at_key=True)
    if path == root:
        raise settings.error("CTX803", f"tenant folder {folder!r} is the whole project; "
                             "documents without a tenant are in tenant 'default'", *key,
                             at_key=True)
    return path.relative_to(root).as_posix()


def _spelt_exactly(root: Path, path: Path) -> bool:
    """On a case-insensitive file system `Content/Acme` finds `content/acme`: compare the
    names the folders hold (only where a differently cased name resolves too)."""
    swapped = path.parent / path.name.swapcase()
    if path.name == path.name.swapcase() or not swapped.exists():
        return True
    current = root
    for part in path.relative_to(root).parts:
        try:
            if part not in os.listdir(current):
                return False
        except OSError:
            return False
        current = current / part
    return True


def _table_errors(section, settings: _Settings, name: str, known: set[str]):
    """The error maker of a [name] table, once the table is checked to be a table of
    known settings."""
    def error(code: str, message: str, *keys, at_key: bool = False) -> ConfigError:
        return settings.error(code, f"[{name}] {message}", name, *keys, at_key=at_key)

    if not isinstance(section, dict):
        raise error("CTX803", "must be a table")
    unknown = sorted(set(section) - known)
    if unknown:
        raise error("CTX802", f"unknown setting(s) {', '.join(unknown)}; known: "
                    f"{', '.join(sorted(known))}", unknown[0], at_key=True)
    return error


def _facts_settings(section, settings: _Settings, root: Path) -> dict:
    """The [facts] table: tenants by folder, complete keys, extractors, fallback bounds."""
    if section is None:
        return {}
    where = ("facts",)
    error = _table_errors(section, settings, "facts", _FACTS_KNOWN)
    out: dict = {}
    tenants = section.get("tenants", {})
    if not isinstance(tenants, dict):
        raise error("CTX803", "'tenants' must be a table of folder = \"tenant\"", "tenants")
    pairs: dict[str, str] = {}
    for folder, tenant in sorted(tenants.items()):
        if not isinstance(tenant, str) or not TENANT_PATTERN.fullmatch(tenant):
            raise error("CTX803", f"tenant {tenant!r} for folder {folder!r} is not a tenant "
                        "id: use letters A-Z a-z, digits, '_' or '-'", "tenants", folder)
        clean = _tenant_folder(root, folder, settings, where + ("tenants",))
        if pairs.get(clean, tenant) != tenant:
            raise error("CTX803", f"folder {clean!r} is given two tenants, {pairs[clean]!r} "
                        f"and {tenant!r}", "tenants", folder, at_key=True)
        pairs[clean] = tenant
    out["facts_tenants"] = tuple(sorted(pairs.items()))
    complete = section.get("complete", {})
    if not isinstance(complete, dict):
        raise error("CTX803", "'complete' must be a table of entity type = "
                    "[\"namespace/key\", ...]", "complete")
    entries = []
    for entity_type, keys in sorted(complete.items()):
        if not NAME_PATTERN.fullmatch(entity_type):  # types are lowercase: "Document" never matches
            raise error("CTX803", f"complete.{entity_type}: an entity type is a lowercase "
                        "name such as document, chunk, entity or skill", "complete",
                        entity_type, at_key=True)
        if not isinstance(keys, list) or not all(
                isinstance(k, str) and k.count("/") == 1
                and all(NAME_PATTERN.fullmatch(part) for part in k.split("/")) for k in keys):
            raise error("CTX803", f"complete.{entity_type} must be a list of "
                        "\"namespace/key\" strings (lowercase names)", "complete", entity_type)
        entries.append((entity_type, tuple(sorted(set(keys)))))
    out["facts_complete"] = tuple(entries)
    extractors = section.get("extractors", [])
    if not isinstance(extractors, list) or not all(
            isinstance(e, str) and re.fullmatch(r"[\w.]+:[\w.]+", e) for e in extractors):
        raise error("CTX803", "'extractors' must be a list of \"module:factory\" names",
                    "extractors")
    out["facts_extractors"] = tuple(extractors)
    for key, default, high in (("fallback_limit", 5, 100), ("fallback_scan", 10_000, 10**7)):
        value = section.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise error("CTX803", f"'{key}' must be an integer from 0 to {high}", key)
        out[f"facts_{key}"] = value
    return out


def _lint_settings(section, settings: _Settings) -> RuleSelection:
    """The [lint] table: select, ignore (codes or prefixes) and per_file_ignores (glob =
    codes, globs relative to the project root)."""
    if section is None:
        return RuleSelection()
    error = _table_errors(section, settings, "lint", _LINT_KNOWN)
    chosen: dict[str, tuple] = {}
    for key in ("select", "ignore"):
        try:
            chosen[key] = tuple(check_prefixes(section.get(key, []), f"'{key}': ",
                                               silenceable_only=key == "ignore"))
        except RuleSettingError as problem:
            raise error("CTX803", str(problem), key) from None
    per_file = section.get("per_file_ignores", {})
    if not isinstance(per_file, dict):
        raise error("CTX803", "'per_file_ignores' must be a table of \"glob\" = [codes]",
                    "per_file_ignores")
    pairs = []
    for pattern, codes in sorted(per_file.items()):
        if not pattern or "\0" in pattern or pattern.startswith("/") or \
                ".." in PurePosixPath(pattern).parts:
            raise error("CTX803", f"per_file_ignores {pattern!r}: a glob relative to the "
                        "project root, without '..'", "per_file_ignores", pattern,
                        at_key=True)
        try:
            pairs.append((pattern, tuple(check_prefixes(codes, f"per_file_ignores "
                                                        f"{pattern!r}: "))))
        except RuleSettingError as problem:
            raise error("CTX803", str(problem), "per_file_ignores", pattern) from None
    return RuleSelection(chosen["select"], chosen["ignore"], tuple(pairs))


def _inside_root(root: Path, value: str, settings: _Settings, what: str, keys: tuple,
                 at_key: bool = False) -> Path:
    """A configured path, links resolved; relative to the root, and inside it (an
    absolute path too)."""
    try:
        resolved = (root / value).resolve()
    except (OSError, ValueError) as error:
        raise settings.error("CTX803", f"{what} is not a usable path ({error})", *keys,
                             at_key=at_key) from None
    if not resolved.is_relative_to(root):
        raise settings.error("CTX804", f"{what} resolves to {resolved}, outside the project "
                             f"root {root}", *keys, at_key=at_key)
    return resolved


def _check_tool_folder(root: Path) -> None:
    """.ctxfst/ (caches, doit's state, the facts ledger, the world state) is written by
    every build: neither it nor anything in it may lead out of the project."""
    tool = root / TOOL_DIR
    for folder in _TOOL_FOLDERS:
        current = tool / folder if folder else tool
        try:
            entries = [current] if not folder else []
            if current.is_dir() and inside(root, current):
                with os.scandir(current) as listing:
                    entries += [Path(e.path) for e in listing if e.is_symlink()]
        except OSError:
            continue  # unreadable: whoever writes there reports it
        for entry in entries:
            if entry.is_symlink() and not inside(root, entry):
                raise ConfigError(f"{entry.relative_to(root)} is a link to {entry.resolve()}, "
                                  "outside the project; ctxfst writes there",
                                  entry, code="CTX804")


def load_config(root: Path, settings: dict, config_file: Path | None, text: str = "",
                prefix: tuple = ()) -> Config:
    """The project in root from its settings table (text: the settings file, for the
    location of errors; prefix: the table's keys in it)."""
    source = _Settings(settings, config_file, text, prefix)
    root = root.resolve()
    unknown = sorted(set(settings) - _KNOWN)
    if unknown:
        raise source.error("CTX802", f"unknown setting(s) {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(_KNOWN))}", unknown[0], at_key=True)

    def text_value(key: str, default: str) -> str:
        value = settings.get(key, default)
        if not isinstance(value, str) or not value:
            raise source.error("CTX803", f"'{key}' must be a non-empty string", key)
        return value

    def number(key: str, default, kind, low, high):
        value = settings.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
            raise source.error("CTX803", f"'{key}' must be a {kind.__name__}", key)
        if not low <= value <= high:
            raise source.error("CTX803", f"'{key}' must be between {low} and {high}", key)
        return kind(value)

    def flag(key: str, default: bool) -> bool:
        value = settings.get(key, default)
        if not isinstance(value, bool):
            raise source.error("CTX803", f"'{key}' must be true or false", key)
        return value

    def folder(key: str, default: str) -> Path:
        value = text_value(key, default)
        return _inside_root(root, value, source, f"'{key}' = {value!r}", (key,))

    model = text_value("embedding_model", DEFAULT_MODEL)
    if model.startswith("hash") and not re.fullmatch(r"hash(-[1-9][0-9]{0,4})?", model):
        raise source.error("CTX803", f"'embedding_model' {model!r}: the hash embedder is "
                           "'hash' or 'hash-N' with N dimensions", "embedding_model")
    remote = REMOTE_MODEL.fullmatch(model)
    if remote is not None and not embedding_host_allowed(remote.group(3)):
        raise source.error("CTX803", f"'embedding_model' {model!r} sends text to "
                           f"{remote.group(3)}, which is not this machine: allow the host "
                           f"with {EMBEDDING_HOSTS_ENV}={remote.group(3)} in your "
                           "environment (settings cannot)", "embedding_model")
    if model.startswith("openai-compatible") and remote is None:
        raise source.error("CTX803", f"'embedding_model' {model!r}: write "
                           "openai-compatible:MODEL@http://HOST:PORT/v1", "embedding_model")
    if not (model in NAMED_MODELS or model.startswith("hash") or _HUB_ID.fullmatch(model)
            or remote is not None):
        # A model folder is code-like input (tokenizers, module classes, weights): one
        # named by a stranger's settings is never loaded.
        raise source.error("CTX803", f"'embedding_model' {model!r} is not a model name: use "
                           f"{', '.join(sorted(NAMED_MODELS))}, 'hash-N', or a Hub id such as "
                           "'BAAI/bge-m3' (local model folders are not accepted)",
                           "embedding_model")
    device = text_value("embedding_device", "auto")
    if not _DEVICE.fullmatch(device):
        raise source.error("CTX803", f"'embedding_device' {device!r}: use auto, cpu, cuda, "
                           "cuda:N or mps", "embedding_device")
    engine = text_value("engine", "local")
    if engine not in ENGINES:
        raise source.error("CTX803", f"'engine' {engine!r}: use {' or '.join(ENGINES)}",
                           "engine")
    patterns = settings.get("extra_edges", list(DEFAULT_EXTRA_EDGES))
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise source.error("CTX803", "'extra_edges' must be a list of glob patterns",
                           "extra_edges")
    for index, pattern in enumerate(patterns):
        if "\0" in pattern:
            raise source.error("CTX803", f"extra_edges pattern {pattern!r} holds a NUL byte",
                               "extra_edges", index)
        parts = PurePosixPath(pattern).parts
        if not parts or parts.count("**") > 1:
            # Each further `**` multiplies the folders the glob walks: eight of them in a
            # deep tree ran for minutes.
            raise source.error("CTX803", f"extra_edges pattern {pattern!r} must name files, "
                               "with at most one '**'", "extra_edges", index)
        if pattern.startswith(("/", "\\")) or ".." in parts:
            raise source.error("CTX804", f"extra_edges pattern {pattern!r} may reach outside "
                               "the content folder: patterns are relative to it, without "
                               "'..'", "extra_edges", index)
    build = BuildSettings(
        embedding_model=model,
        similar_top_k=number("similar_top_k", 5, int, 0, 1000),
        similar_min_score=number("similar_min_score", 0.35, float, -1.0, 1.0),
        similar_exact_max=number("similar_exact_max", 100_000, int, 2, 1_000_000_000),
        extra_edges=tuple(patterns),
        embed_batch_size=number("embed_batch_size", 32, int, 1, 4096),
        json_exports=flag("json_exports", True),
        **_facts_settings(settings.get("facts"), source, root),
    )
    content_dir = folder("content_dir", "content")
    skills_dir = folder("skills_dir", "skills")
    build_dir = folder("build_dir", "build")
    tool = root / TOOL_DIR
    for key, path in (("content_dir", content_dir), ("skills_dir", skills_dir),
                      ("build_dir", build_dir)):
        if path.is_relative_to(tool):
            raise source.error("CTX805", f"'{key}' is inside {TOOL_DIR}/, ctxfst's own "
                               "folder", key)
    # `doit clean` empties the build folder and builds replace it: never the sources.
    if build_dir == root:
        raise source.error("CTX805", "'build_dir' is the project root: `doit clean` would "
                           "empty the project", "build_dir")
    for key, path in (("content_dir", content_dir), ("skills_dir", skills_dir)):
        if path.is_relative_to(build_dir):
            raise source.error("CTX805", f"'build_dir' holds the {key.split('_')[0]} folder: "
                               "`doit clean` would delete sources", "build_dir")
    report = flag("report", False)
    _check_tool_folder(root)
    return Config(root=root, content_dir=content_dir, skills_dir=skills_dir,
                  build_dir=build_dir, config_file=config_file, build=build,
                  embedding_device=device, engine=engine,
                  ray_concurrency=number("ray_concurrency", 0, int, 0, 4096),
                  lint=_lint_settings(settings.get("lint"), source), report=report)
