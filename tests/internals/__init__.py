"""White-box tests of a2sql's internals: the SQL each operation sends (golden files
under sql/), the plans PostgreSQL and SQLite choose, how statements reach the driver
(pipelines, prepared statements, the event loop and the threads) and the private
SQLAlchemy API a2sql relies on. They change when the internals do; the contract is
tested apart from them (a2sql/testing/conformance)."""
