"""Which canonical tables a user's SQL writes to.

The canonical tables belong to nsa: a `DELETE FROM reports` leaves every other table's rows of
those reports behind, with nothing pointing at them. `nsa sql` refuses such statements unless
asked (`--allow-writes`); writes to the user's own tables are theirs to make.

DuckDB splits the text into statements and tells each one's type (so a parse error is reported
before anything runs); the target of a write is read from the statement with string literals
and comments removed, qualified (`main.reports`) or quoted (`"Reports"`) alike.

Statements that install, load or update DuckDB extensions, or change where they come from, are
refused whatever the options (`refuse_extensions`): nsa never downloads anything.
"""

from __future__ import annotations

import re
from functools import lru_cache

import duckdb

from .errors import QueryError
from .params import connect
from .schema import TABLES

_IDENT = r'(?:"(?:[^"]|"")+"|[A-Za-z_][\w$]*)'
_NAME = rf"((?:{_IDENT}\s*\.\s*){{0,2}}{_IDENT})"
_TEMP = "(?:TEMP|TEMPORARY|PERSISTENT)"
# (verb shown to the user, pattern whose group 1 is the written table)
_WRITES = [
    ("INSERT", rf"\bINSERT\s+(?:OR\s+\w+\s+)?INTO\s+{_NAME}"),
    ("UPDATE", rf"\bUPDATE\s+{_NAME}"),
    ("DELETE", rf"\bDELETE\s+FROM\s+{_NAME}"),
    ("TRUNCATE", rf"\bTRUNCATE\s+(?:TABLE\s+)?{_NAME}"),
    ("DROP", rf"\bDROP\s+(?:TABLE|VIEW)\s+(?:IF\s+EXISTS\s+)?{_NAME}"),
    ("ALTER", rf"\bALTER\s+(?:TABLE|VIEW)\s+(?:IF\s+EXISTS\s+)?{_NAME}"),
    (
        "CREATE",
        rf"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:{_TEMP}\s+)?(?:TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?{_NAME}",
    ),
    ("COPY", rf"\bCOPY\s+{_NAME}\s+FROM\b"),
]
_WRITE_PATTERNS = [(verb, re.compile(p, re.IGNORECASE)) for verb, p in _WRITES]
_DROP_SCHEMA = re.compile(rf"\bDROP\s+SCHEMA\s+(?:IF\s+EXISTS\s+)?{_NAME}", re.IGNORECASE)
# String literals and comments, read left to right (a quote inside a comment is no literal).
_NOISE = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.DOTALL)


def _last_part(name: str) -> str:
    part = re.findall(_IDENT, name)[-1]
    return part[1:-1].replace('""', '"') if part.startswith('"') else part


@lru_cache(maxsize=8)
def _statements(sql: str) -> tuple[tuple[duckdb.StatementType | None, str], ...]:
    """(type, text) of each statement, split by DuckDB's parser; parsed once for both checks (a
    DuckDB connection costs some 50 ms). Raises duckdb.ParserException for text that is not SQL."""
    try:
        with connect(":memory:") as parser:
            return tuple((st.type, st.query) for st in parser.extract_statements(sql))
    except duckdb.ParserException:
        raise
    except duckdb.Error:  # parsed, but binding a PRAGMA failed here: read the whole text instead
        return ((None, sql),)


def canonical_writes(sql: str) -> list[tuple[str, str]]:
    """(verb, table) for each write the statements make to a canonical table or view.

    Raises duckdb.ParserException for text that is not SQL.
    """
    canonical = {t.name.lower(): t.name for t in TABLES}
    found: list[tuple[str, str]] = []
    for kind, query in _statements(sql):
        if kind == duckdb.StatementType.SELECT:
            continue
        text = _NOISE.sub(lambda m: "''" if m[0].startswith("'") else " ", query)
        for verb, pattern in _WRITE_PATTERNS:
            for m in pattern.finditer(text):
                table = canonical.get(_last_part(m[1]).lower())
                if table and (verb, table) not in found:
                    found.append((verb, table))
        for m in _DROP_SCHEMA.finditer(text):
            if _last_part(m[1]).lower() == "main":
                found.append(("DROP SCHEMA", "main"))
    return found


# Settings that would let DuckDB fetch or run extensions from elsewhere (params.OFFLINE turns the
# first two off on every connection nsa opens).
_EXTENSION_SETTINGS = re.compile(
    r"\b(autoinstall_known_extensions|autoload_known_extensions|custom_extension_repository|"
    r"autoinstall_extension_repository|extension_directory|allow_community_extensions|"
    r"allow_unsigned_extensions|allow_extensions_metadata_mismatch)\b",
    re.IGNORECASE,
)
_UPDATE_EXTENSIONS = re.compile(r"^\s*UPDATE\s+EXTENSIONS\b", re.IGNORECASE)


def refuse_extensions(sql: str) -> None:
    """Raise QueryError for a statement that installs, loads or updates a DuckDB extension, or
    changes how extensions are found: nsa never downloads anything, and `nsa sql` is no way
    around that. Raises duckdb.ParserException for text that is not SQL."""
    for kind, query in _statements(sql):
        text = _NOISE.sub(lambda m: "''" if m[0].startswith("'") else " ", query).strip()
        loads = kind == duckdb.StatementType.LOAD or _UPDATE_EXTENSIONS.match(text) is not None
        setting = kind in {duckdb.StatementType.SET, duckdb.StatementType.PRAGMA, None}
        if loads or (setting and _EXTENSION_SETTINGS.search(text)):
            raise QueryError(
                f"`{' '.join(query.split())[:60]}` is refused: nsa sql does not install, load or update "
                "DuckDB extensions, nor change where they come from (nsa never downloads anything), and "
                "nsa's tables and queries need none; for your own extensions, open the workspace in "
                "DuckDB itself (`duckdb nsa.duckdb`)."
            )
