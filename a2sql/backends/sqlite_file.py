"""A store's SQLite file: made only when asked for, and watched for deletion or replacement.

SQLite opens whatever file is at a path when a connection is made, creating
an empty database where there is none; a connection already open keeps the
file it opened, even after that file is deleted or another takes its path.
So a deleted database would go on taking writes through the pool's open
connections, lost with the unlinked file, while new connections started an
empty database under the same name. A store therefore records which file it
opened (device and inode) and checks that the path still names that file
after each of its transactions, and before one that may open a connection.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from sqlalchemy import URL

from a2sql.core.errors import A2Error, ErrorCode, invalid

# Folders and database files a2sql creates itself are its user's alone:
# sessions hold whatever the application put in them.
FOLDER_MODE = 0o700
FILE_MODE = 0o600


def file_of(url: URL) -> Path | None:
    """The database file of a SQLite URL; ``None`` for a memory database."""
    if url.database in (None, "", ":memory:"):
        return None
    database = str(url.database)
    if str(url.query.get("uri", "")).lower() in ("true", "1") and database.startswith("file:"):
        # A SQLite URI (sqlite:///file:/path/a2.db?mode=ro&uri=true): its path,
        # not a folder named "file:" under the working directory.
        uri = urlsplit(database)
        if uri.path in ("", ":memory:") or url.query.get("mode") == "memory":
            return None
        return Path(unquote(uri.path)).expanduser()
    return Path(database).expanduser()


def make_ready(path: Path, *, create: bool) -> None:
    """Check that ``path`` can hold a database; create it (and its folders) if it is missing
    and ``create``, else refuse."""
    if "\x00" in str(path):
        raise invalid("url", f"the SQLite database path {str(path)!r} holds a NUL character")
    try:
        if path.is_dir():
            raise invalid("url", f"cannot open the SQLite database {path}: it is a folder")
        if path.exists():
            return
    except (OSError, ValueError) as error:  # ValueError: a NUL in the path
        raise invalid("url", f"cannot open the SQLite database {path!r}: {error}") from None
    if not create:
        raise invalid(
            "url",
            f"there is no SQLite database at {path}: a store creates one only when it may "
            "migrate (migrate=True, or the default for SQLite)",
        )
    _create_folders(path.parent)
    try:
        # An empty file is an empty SQLite database.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:  # another process made it first
        pass
    except OSError as error:
        raise invalid("url", f"cannot create the SQLite database {path}: {error}") from None


def _create_folders(folder: Path) -> None:
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    try:
        for each in reversed(missing):
            each.mkdir(mode=FOLDER_MODE, exist_ok=True)
    except OSError as error:
        raise invalid(
            "url", f"cannot create the folder of the SQLite database {missing[0]}: {error}"
        ) from None


class DatabaseFile:
    """The file a store opened, and the check that its path still names it."""

    __slots__ = ("_device", "_inode", "_where", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        # Checked on every transaction: os.stat of a str, not of a Path.
        self._where = os.fspath(path)
        try:
            found = os.stat(self._where)
        except OSError:
            raise self._gone() from None
        self._device, self._inode = found.st_dev, found.st_ino

    def check(self) -> None:
        """Raise ``STORE_UNAVAILABLE`` if the file was deleted, or another took its path."""
        try:
            found = os.stat(self._where)
        except OSError:
            raise self._gone() from None
        if found.st_ino != self._inode or found.st_dev != self._device:
            raise self._gone()

    def _gone(self) -> A2Error:
        return A2Error(
            ErrorCode.STORE_UNAVAILABLE,
            f"the SQLite database {self.path} was deleted or replaced while the store was "
            "open: nothing more is read or written through this store; open a new one",
        )
