"""``store.change_marker()``: a text that moves with every committed write, whoever wrote.

A second store object on the same store writes (another connection: what another process
does on SQLite and PostgreSQL; on DuckDB, which one process holds, another object of it),
and the first object's marker must move for each kind of write a viewer shows.
"""

from __future__ import annotations

import sessionkit as sk


def _target(engine: str, tmp_path, request) -> str:
    if engine == "postgresql":
        from store.pg_cluster import new_store_url

        request.getfixturevalue("pg_url")  # skips, or fails under CI=true, without a server
        return new_store_url()
    return str(tmp_path / ("m.db" if engine == "sqlite" else "m.duckdb"))


def _msg(mid: str, text: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def test_the_marker_moves_with_every_write_of_another_store_object(engine, tmp_path, request):
    target = _target(engine, tmp_path, request)
    with sk.open_store(target) as viewer, sk.open_store(target) as writer:
        seen = [viewer.change_marker()]
        assert viewer.change_marker() == seen[-1]  # nothing written: the same text
        s = writer.session("s")
        writes = [
            lambda: s.append(_msg("a", "hello")),
            lambda: writer.session("t").import_many([(_msg("x", "imported"), None, None)]),
            lambda: s.update({**_msg("a", "hello again")}),
            lambda: writer.add_label("s", "a", "good"),
            lambda: writer.import_runs([{"run_id": "r1", "session_id": "s", "status": "ok", "started_at": 1e12}]),
            lambda: s.delete("a"),
            lambda: writer.delete_session("t"),
        ]
        for write in writes:
            write()
            now = viewer.change_marker()
            assert now not in seen, f"the marker did not move after write {len(seen)}"
            seen.append(now)
            assert viewer.change_marker() == now
        assert isinstance(seen[0], str) and len(set(seen)) == len(writes) + 1
