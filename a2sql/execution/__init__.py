"""How a plan's statements reach a driver: through SQLAlchemy's ``Connection`` or on the
driver's cursor, in a transaction of a2sql's own or the caller's, and for an ``AsyncStore``
from the event loop or a thread."""
