"""The DuckDB engine: its engine (``engine``), what it keeps of a file in memory (``state``:
the append journal, the caches of rows) and its own BM25 search index (``search``)."""
