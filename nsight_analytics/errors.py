"""Errors the CLI turns into one clear sentence and exit code 2."""

from __future__ import annotations


class NsaError(Exception):
    """Base class: any error a user can act on. The message says what is wrong and what to do."""


class InputError(NsaError):
    """The input file is missing, unreadable, or not what nsa can ingest."""


class WorkspaceError(NsaError):
    """The workspace cannot be opened or written (busy, unwritable, corrupt)."""


class QueryError(NsaError):
    """A query name, parameter or SQL statement is wrong."""


class SourceGoneError(NsaError):
    """Data left in the source file at ingest is needed, and that file is gone or has changed."""
