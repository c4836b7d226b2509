"""What ``store.sql`` runs on: the analysis views (``views``, ``tree_views``), the sandbox that
decides which queries run (``sandbox``), running one query (``query``) and the cache of the
analysis columns beside a store that is not DuckDB (``cache``)."""
