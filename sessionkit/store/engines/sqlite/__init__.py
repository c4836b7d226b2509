"""The SQLite engine: its engine (``engine``) and its search index (``search``: FTS5 and the
search window)."""
