"""Declared facts and tenants in the frontmatter: checked during validation.

A `facts:` list may sit on the document (top level), on an entity or on a chunk:

    facts:
      - namespace: domain        # [a-z0-9][a-z0-9_.-]*
        key: topic               # same form
        value: invoicing
        value_type: keyword      # keyword (default), text, number, date, enum, json
        confidence: 0.9          # 0..1, default 1.0
        evidence: "invoice run"  # optional: text that occurs in the record's passage

This module is standard library only: validation (the git hook) imports it, and it must
stay cheap. The facts build stage (ctxfst.facts) uses the same parsing and value
normalisation, so what validation accepts is exactly what the build extracts.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from ..diagnostics import Diagnostic
from .ids import NAME_HINT, NAME_PATTERN, TENANT_HINT, TENANT_PATTERN
from .text import normalize

VALUE_TYPES = ("keyword", "text", "number", "date", "enum", "json")
FIELDS = ("namespace", "key", "value", "value_type", "confidence", "evidence")
_ENUM_PATTERN = re.compile(r"[A-Za-z0-9_.:-]+")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?"
                        r"(Z|[+-]\d{2}:\d{2})?")
MAX_NUMBER_EXPONENT = 308  # a double's range: further out is a typo, and a huge string
# Finding an excerpt reads passages until it occurs; thousands of excerpts against
# megabytes of passages multiply into minutes. Past this many characters read for one
# document, the rest are refused (CTX312) rather than searched.
MAX_EVIDENCE_READ = 200_000_000


@dataclass(frozen=True)
class DeclaredFact:
    """One valid entry of a `facts:` list."""

    namespace: str
    key: str
    value_text: str
    value_norm: str
    value_type: str
    confidence: float
    evidence: str | None
    path: tuple  # the entry's frontmatter path, for locating it in the source


class EvidenceSearch:
    """Finds `evidence:` excerpts in passages, within MAX_EVIDENCE_READ characters read
    for one document."""

    def __init__(self) -> None:
        self.left = MAX_EVIDENCE_READ
        self.refused = False  # the budget ran out (reported once)

    def occurs(self, excerpt: str, passages: list[str]) -> bool | None:
        """Whether excerpt occurs in one of passages; None once the budget is spent."""
        for passage in passages:
            if self.left < len(passage):
                self.left = 0
                return None
            found = passage.find(excerpt)
            self.left -= len(passage) if found < 0 else found + len(excerpt)
            if found >= 0:
                return True
        return False

    def refusal(self, item: Any, path: tuple) -> Diagnostic | None:
        """The one CTX312 of a document whose budget ran out, at the first excerpt left."""
        if self.refused:
            return None
        from .model import diagnostic_at

        self.refused = True
        return diagnostic_at(item, path, "CTX312", "evidence excerpts not checked from here "
                             f"on: finding them would read over {MAX_EVIDENCE_READ:,} "
                             "characters of passages; split the document or cite fewer "
                             "excerpts")


def tenant_problem(value: Any) -> str | None:
    """Why value is not a usable tenant id, or None when it is one."""
    if not isinstance(value, str):
        return f"must be a string of {TENANT_HINT}, found {type(value).__name__} {value!r}"
    if not TENANT_PATTERN.fullmatch(value):
        return f"{value!r} is not a tenant id: use {TENANT_HINT}"
    return None


def canonical_number(value: Any) -> str:
    """A number's canonical text: no exponent, no trailing zeros, no '-0'."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    try:
        number = Decimal(str(value).strip().replace("_", "")) if isinstance(value, str) \
            else Decimal(repr(value) if isinstance(value, float) else value)
    except (InvalidOperation, TypeError, ValueError):
        raise ValueError(f"{value!r} is not a number") from None
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a finite number")
    if number and abs(number.adjusted()) > MAX_NUMBER_EXPONENT:
        raise ValueError(f"{value!r} is out of range (beyond 1e±{MAX_NUMBER_EXPONENT})")
    # Exact: a precision as long as the number's own digits never rounds two numbers
    # into one fact (the default context keeps 28 digits).
    exact = Context(prec=max(1, len(number.as_tuple().digits)))
    text = format(number.normalize(exact), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def canonical_date(value: Any) -> str:
    """An ISO 8601 date (YYYY-MM-DD) or date-time (UTC, ending in Z when zoned)."""
    if isinstance(value, _dt.datetime):
        moment = value
    elif isinstance(value, _dt.date):
        return value.isoformat()
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            try:
                return _dt.date.fromisoformat(text).isoformat()
            except ValueError:
                raise ValueError(f"{value!r} is not a valid date") from None
        if not _DATE_TIME.fullmatch(text):  # the extended form only: one spelling per date
            raise ValueError(f"{value!r} is not an ISO 8601 date such as 2026-03-12")
        try:
            moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 date such as 2026-03-12") from None
    else:
        raise ValueError(f"{value!r} is not an ISO 8601 date such as 2026-03-12")
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(_dt.UTC)
        except OverflowError:  # 9999-12-31T23:59-01:00 is past the last representable UTC
            raise ValueError(f"{value!r} is out of range in UTC") from None
        return moment.replace(tzinfo=None).isoformat() + "Z"
    return moment.isoformat()


def normalize_value(value: Any, value_type: str) -> tuple[str, str]:
    """(raw text, normalised value) of a value of a type; ValueError when it does not fit.

    Keyword values that name an entity are mapped to the entity id later, at extraction
    time (the alias table needs the whole catalog); this is the context-free part.
    """
    if value_type in ("keyword", "text"):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"a {value_type} value must be a string, found "
                             f"{type(value).__name__}")
        text = value if isinstance(value, str) else str(value)
        norm = normalize(text)
        if not norm:
            raise ValueError(f"a {value_type} value must not be empty")
        return text, norm
    if value_type == "enum":
        if not isinstance(value, str) or not _ENUM_PATTERN.fullmatch(value):
            raise ValueError("an enum value is one token of letters, digits, '_', '.', ':' "
                             f"or '-', found {value!r}")
        return value, value.casefold()
    if value_type == "number":
        return (value if isinstance(value, str) else str(value)), canonical_number(value)
    if value_type == "date":
        raw = value if isinstance(value, str) else value.isoformat() if isinstance(
            value, (_dt.date, _dt.datetime)) else str(value)
        return raw, canonical_date(value)
    if value_type == "json":
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                              allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"not a JSON value ({error})") from None
        return text, text
    raise ValueError(f"unknown value type {value_type!r}")


def _confidence(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def declared_facts(item: Any, base: tuple, raw: Any, label: str, passage: list[str] | None,
                   out: list[Diagnostic], search: EvidenceSearch) -> list[DeclaredFact]:
    """Check one `facts:` value (raw YAML data) at frontmatter path base + ('facts',).

    passage lists the texts an `evidence:` excerpt must occur in, one of them (None: not
    checkable here, the build checks it), searched through search (one per document).
    Diagnostics are located through item.source_map.
    """
    from .model import diagnostic_at as at

    where = base + ("facts",)
    if not isinstance(raw, list):
        out.append(at(item, where, "CTX701", f"{label}: 'facts' must be a list of "
                      f"mappings (namespace, key, value), found {type(raw).__name__}"))
        return []
    found: list[DeclaredFact] = []
    seen: dict[tuple, int] = {}
    for index, entry in enumerate(raw):
        path = where + (index,)
        name = f"{label}: fact #{index + 1}"
        if not isinstance(entry, dict):
            out.append(at(item, path, "CTX701", f"{name} must be a mapping with namespace, "
                          f"key and value, found {type(entry).__name__} {entry!r:.60}"))
            continue
        problems = len(out)
        for field_name in sorted(set(entry) - set(FIELDS), key=str):
            out.append(at(item, path + (field_name,), "CTX707",
                          f"{name}: unknown field {field_name!r}; a fact has "
                          f"{', '.join(FIELDS)}"))
        missing = [f for f in ("namespace", "key", "value") if f not in entry]
        if missing:
            out.append(at(item, path, "CTX702", f"{name}: missing {', '.join(missing)}"))
        for field_name in ("namespace", "key"):
            value = entry.get(field_name)
            if field_name in entry and not (isinstance(value, str)
                                            and NAME_PATTERN.fullmatch(value)):
                out.append(at(item, path + (field_name,), "CTX703",
                              f"{name}: {field_name} {value!r} is invalid; use {NAME_HINT}"))
        confidence = 1.0
        if "confidence" in entry:
            checked = _confidence(entry["confidence"])
            if checked is None:
                out.append(at(item, path + ("confidence",), "CTX704",
                              f"{name}: confidence must be a number from 0 to 1, found "
                              f"{entry['confidence']!r}"))
            else:
                confidence = checked
        value_type = entry.get("value_type", "keyword")
        if value_type not in VALUE_TYPES:
            out.append(at(item, path + ("value_type",), "CTX705",
                          f"{name}: unknown value_type {value_type!r}; expected one of "
                          f"{', '.join(VALUE_TYPES)}"))
            value_type = None
        text = norm = None
        if "value" in entry and value_type is not None:
            try:
                text, norm = normalize_value(entry["value"], value_type)
            except ValueError as error:
                out.append(at(item, path + ("value",), "CTX706", f"{name}: {error}"))
        evidence = entry.get("evidence")
        if evidence is not None:
            if not isinstance(evidence, str) or not evidence.strip():
                out.append(at(item, path + ("evidence",), "CTX708",
                              f"{name}: evidence must be a non-empty excerpt of the text"))
                evidence = None
            elif passage is not None:
                occurs = search.occurs(evidence, passage)
                if occurs is None:
                    out.extend(filter(None, [search.refusal(item, path + ("evidence",))]))
                    continue  # unchecked: never kept as a fact without its evidence
                if not occurs:
                    where_text = "the passage" if label.startswith("chunk") else \
                        "any passage of the document"
                    out.append(at(item, path + ("evidence",), "CTX708",
                                  f"{name}: evidence {evidence!r:.60} does not occur in "
                                  f"{where_text}"))
                    evidence = None
        if len(out) > problems or text is None or norm is None:
            continue
        key = (entry["namespace"], entry["key"], norm)
        if key in seen:
            out.append(at(item, path, "CTX710", f"{name} repeats fact #{seen[key] + 1} "
                          f"({entry['namespace']}/{entry['key']} = {text!r})"))
            continue
        seen[key] = index
        found.append(DeclaredFact(entry["namespace"], entry["key"], text, norm,
                                  value_type, confidence, evidence, path))
    return found


def check_document(doc) -> None:
    """Validate a typed document's tenant and `facts:` lists; store what is valid.

    Sets doc.facts to {("document",): [...], ("entities", i): [...], ("chunks", i): [...]}.
    """
    data = doc.frontmatter or {}
    out = doc.diagnostics
    facts: dict[tuple, list[DeclaredFact]] = {}
    if "tenant" in data:
        problem = tenant_problem(data["tenant"])
        if problem is not None:
            from .model import diagnostic_at

            out.append(diagnostic_at(doc, ("tenant",), "CTX709", f"tenant {problem}"))
    # In chunk id order, as the facts build searches them (so this bounds its work too).
    everything = [doc.bodies[chunk_id].content for chunk_id in sorted(doc.bodies)]
    search = EvidenceSearch()
    all_local = all(record.content_path is None for _, record in doc.chunks)
    if "facts" in data:
        facts[("document",)] = declared_facts(doc, (), data["facts"], "document", everything
                                              if all_local else None, out, search)
    for section, records in (("entities", doc.entities), ("chunks", doc.chunks)):
        raw_list = data.get(section)
        for index, record in records:
            raw = raw_list[index] if isinstance(raw_list, list) else None
            if not isinstance(raw, dict) or "facts" not in raw:
                continue
            if section == "chunks":
                body = doc.bodies.get(record.id)
                passage = [body.content] if body is not None else None
                label = f"chunk '{record.id}'"
            else:
                passage = everything if all_local else None
                label = f"entity '{record.id}'"
            facts[(section, index)] = declared_facts(doc, (section, index), raw["facts"],
                                                     label, passage, out, search)
    doc.facts = facts
