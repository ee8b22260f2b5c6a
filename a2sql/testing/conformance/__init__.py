"""a2sql's contract in executable form: every rule of docs/contract.md, run on a store
through each facade (a2sql.testing.facades), each test on a fresh database.

``A2SQL_CONFORMANCE_URL=<url> pytest --pyargs a2sql.testing.conformance`` runs it
against that database; its fixtures are a2sql.testing.plugin's.
"""
