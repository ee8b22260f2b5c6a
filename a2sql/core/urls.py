"""How a database URL is shown in messages and output (never with a password), and
what the commands' ``--listen`` means.

A password can sit in the URL's user part (``u:secret@host``) or in its
query (``?password=secret``, which libpq and psycopg read too, and
``sslpassword``); both are masked. Every place a2sql prints or raises a URL
goes through here.
"""

from __future__ import annotations

import re

from sqlalchemy import URL

MASK = "***"

# A text that is not a URL SQLAlchemy can parse may still hold a password.
_USER_PASSWORD = re.compile(r"(?<=://)([^/?#@]*?):[^@]*@")
_QUERY_PASSWORD = re.compile(r"([?&][^=&#]*password[^=&#]*=)[^&#]*", re.IGNORECASE)


def _is_secret(key: str) -> bool:
    return "password" in key.lower()


def shown_url(url: URL) -> str:
    """``url`` as text for people to read: its password, wherever it is, is ``***``."""
    secret = {key: MASK for key in url.query if _is_secret(key)}
    if secret:
        url = url.update_query_dict(secret)
    # Rendered, then unquoted: update_query_dict's *** would read %2A%2A%2A.
    return url.render_as_string(hide_password=True).replace("%2A%2A%2A", MASK)


def shown_url_text(text: str) -> str:
    """A URL given as text that does not parse, shown with what looks like a password masked."""
    text = _USER_PASSWORD.sub(rf"\1:{MASK}@", text, count=1)
    return _QUERY_PASSWORD.sub(rf"\1{MASK}", text)


def listen_argument(listen: str | None) -> bool | str:
    """The commands' ``--listen URL|off`` (absent: ``None``) as ``create_store``'s ``listen``."""
    if listen is None:
        return True
    return False if listen == "off" else listen
