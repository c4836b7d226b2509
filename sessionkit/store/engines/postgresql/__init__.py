"""The PostgreSQL engine: its engine (``engine``), its search index (``search``: a tsvector per
message), its URLs and search text (``text``) and its listener thread (``listen``)."""
