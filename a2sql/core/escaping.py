"""Text made safe to print: control characters escaped, suggested commands quoted.

Session ids, event types, lanes, holders, reducer names and handler errors
come from whoever wrote to the database. Printed raw, an escape sequence in
one of them reaches the operator's terminal (clearing it, rewriting what it
shows, setting its title, ...), and a command line suggested with it can run
something else when pasted. ``--json`` output keeps every value exact: JSON
escapes are the same string to a parser.
"""

from __future__ import annotations

import re
import shlex

# C0 and C1 controls and DEL; the bidirectional overrides, which reorder
# what a terminal shows (U+061C, U+200E, U+200F, U+202A-U+202E,
# U+2066-U+2069); the line and paragraph separators.
_CONTROLS = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)
# In JSON text, those left unescaped by json.dumps(ensure_ascii=False), which
# escapes the C0 controls only.
_JSON_UNESCAPED = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` with each control character written as an escape (``\\x1b``, ``\\n``)."""
    return _CONTROLS.sub(_escape, str(text))


def json_printable(document: str) -> str:
    """JSON text with the controls ``json.dumps`` leaves raw written as ``\\uXXXX``:
    the same value to a parser. (Outside strings JSON text is ASCII.)"""
    return _JSON_UNESCAPED.sub(lambda match: f"\\u{ord(match.group()):04x}", document)


def shell_word(word: str) -> str:
    """``word`` as one shell word: ``shlex.quote``, or ``$'...'`` (bash, zsh, ksh and
    POSIX sh since 2024) for a word with control characters, which a quoted string
    would carry raw."""
    if not _CONTROLS.search(word):
        return shlex.quote(word)
    escaped = word.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + _CONTROLS.sub(_escape, escaped) + "'"


def command_line(*words: object) -> str:
    """A command for the operator to run or paste, each word quoted for the shell."""
    return " ".join(shell_word(str(word)) for word in words)
