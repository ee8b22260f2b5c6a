"""``python -m a2sql.cli``: the ``a2sql`` command."""

import sys

from a2sql.cli import main

sys.exit(main())
