"""a2sql against the bare-driver floor: ``python -m bench --engine E --workload NAME``.

See bench/README.md. Nothing here is a test: these are scripts that measure.
"""
