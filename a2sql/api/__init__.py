"""What users touch: ``Store``, ``AsyncStore``, opening one from a URL, streams, reducers,
copying; re-exported by ``a2sql``."""
