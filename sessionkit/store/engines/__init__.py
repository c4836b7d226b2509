"""The engines: one package each for SQLite, DuckDB and PostgreSQL (its engine, its search
index and what its dialect needs). Only :func:`sessionkit.store.open_store` imports them."""
