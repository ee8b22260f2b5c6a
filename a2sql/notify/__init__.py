"""Wake-ups for streams and idle workers: in-process, and across processes where the
engine can (LISTEN/NOTIFY)."""
