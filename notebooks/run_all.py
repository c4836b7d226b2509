"""Execute the numbered notebooks and save their outputs in place: ``python notebooks/run_all.py``.

Each notebook runs top to bottom in a fresh kernel of this Python, inside a
fresh copy of this folder (its ``data/`` but no ``demo.db`` or other leftovers),
so the saved outputs are what a new clone produces and what the nbval tests
compare against. Afterwards the notebook is cleaned for committing:

- no widget state (``metadata.widgets``) and no widget views in the outputs (nor the
  random key a live widget finds its snapshot by): a
  saved output keeps each view's static HTML snapshot and its text, which
  JupyterLab, GitHub and nbconvert show until the cell runs again (then the live
  widget appears);
- no per-cell execution timings, and ``language_info`` reduced to the language
  name, so re-running changes a notebook only where its outputs changed.

Usage::

    python notebooks/run_all.py                    # every NN-*.ipynb
    python notebooks/run_all.py 03 05-compaction   # some of them (number or name)
    python notebooks/run_all.py --check            # run, compare with nbval's sanitize rules, write nothing

``--check`` exits non-zero when a fresh run's outputs differ from the saved ones
(after the masks of ``sanitize.cfg``) and prints the first differing cells.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sessionkit._lab import _kernel_spec  # the same kernel spec JupyterLab's demo uses

HERE = Path(__file__).resolve().parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
SNAPSHOT_KEY = re.compile(r' data-sk-snapshot-for="[^"]*"')
CELL_TIMEOUT = 300


def notebooks(selection: list[str] | None = None, folder: Path = HERE) -> list[Path]:
    """The numbered notebooks of ``folder`` (``01-*.ipynb`` ...), optionally a selection."""
    found = sorted(p for p in folder.glob("[0-9][0-9]-*.ipynb"))
    if not selection:
        return found
    chosen = []
    for key in selection:
        key = Path(key).name.removesuffix(".ipynb")
        match = [p for p in found if p.stem == key or p.stem.split("-", 1)[0] == key]
        if not match:
            raise SystemExit(f"no notebook matches {key!r}; have: {', '.join(p.stem for p in found)}")
        chosen += [p for p in match if p not in chosen]
    return chosen


def fresh_copy(dest: Path, folder: Path = HERE) -> Path:
    """Copy the notebooks and their data (nothing generated) into ``dest``; returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in notebooks(folder=folder):
        shutil.copy2(path, dest / path.name)
    for name in ("sanitize.cfg",):
        if (folder / name).exists():
            shutil.copy2(folder / name, dest / name)
    if (folder / "data").is_dir():
        shutil.copytree(folder / "data", dest / "data", dirs_exist_ok=True)
    return dest


def kernel_env(base: Path) -> dict[str, str]:
    """Environment for a reproducible offline kernel with every Jupyter folder under ``base``.

    A ``python3`` kernel spec pointing at this interpreter comes first on
    ``JUPYTER_PATH``, so the notebooks run with the Python that runs this script
    whatever kernels the machine has registered.
    """
    env = dict(os.environ)
    for var, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("IPYTHONDIR", "ipython"),
        ("MPLCONFIGDIR", "mpl"),
    ):
        path = base / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    _kernel_spec(base / "path")
    env["JUPYTER_PATH"] = str(base / "path")
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["LITELLM_OFFLINE_MODE"] = "true"
    env["PYTHONHASHSEED"] = "0"
    env["TZ"] = "UTC"
    env.pop("MPLBACKEND", None)  # the kernel's inline backend draws the figures
    env.pop("SESSIONKIT_DEMO_STORE", None)
    return env


def clean(nb) -> None:
    """Strip widget state and views, timings and machine details from an executed notebook."""
    nb.metadata.pop("widgets", None)
    info = nb.metadata.get("language_info") or {}
    nb.metadata["language_info"] = {"name": info.get("name", "python")}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is not None:
                data.pop(WIDGET_VIEW, None)
                data.pop(WIDGET_STATE, None)
                if not data:
                    continue
                html = data.get("text/html")
                if isinstance(html, str):  # the key a live widget hides its snapshot by: no widget is saved
                    data["text/html"] = SNAPSHOT_KEY.sub("", html)
                meta = out.get("metadata") or {}
                meta.pop(WIDGET_VIEW, None)
            kept.append(out)
        cell.outputs = kept


def execute(path: Path, workdir: Path, env: dict[str, str]):
    """Run the notebook at ``path`` with ``workdir`` as its working folder; returns the executed node."""
    import nbclient
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        client = nbclient.NotebookClient(
            nb,
            timeout=CELL_TIMEOUT,
            kernel_name="python3",
            store_widget_state=False,
            record_timing=False,
            allow_errors=False,
            resources={"metadata": {"path": str(workdir)}},
        )
        client.execute(cwd=str(workdir))
    finally:
        os.environ.clear()
        os.environ.update(old)
    clean(nb)
    return nb


# ---------------------------------------------------------------------------
# comparison with the same masks nbval uses (for --check)


def sanitize_rules(cfg: Path = HERE / "sanitize.cfg") -> list[tuple[re.Pattern, str]]:
    """The ``(regex, replacement)`` pairs of an nbval sanitize file, read the way nbval reads them."""
    text = cfg.read_text(encoding="utf-8")
    pairs = re.findall(r"^regex: (.*)$\n^replace:[ ]?(.*)$", text, flags=re.MULTILINE)
    return [(re.compile(regex), replace) for regex, replace in pairs]


def _comparable(nb, rules) -> list[list[str]]:
    """Each code cell's outputs as nbval compares them: text and HTML, masked."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        texts = []
        last_stream = None
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                if last_stream == out.get("name"):  # consecutive writes to one stream are one output
                    texts[-1] += out.get("text", "")
                else:
                    texts.append(f"{out.get('name')}: {out.get('text')}")
                last_stream = out.get("name")
                continue
            last_stream = None
            for key in ("text/plain", "text/html", "text/markdown", "application/json"):
                value = (out.get("data") or {}).get(key)
                if value is not None:
                    texts.append(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")
            if out.get("output_type") == "error":
                texts.append(f"error: {out.get('ename')}: {out.get('evalue')}")
        masked = []
        for text in texts:
            for pattern, replace in rules:
                text = pattern.sub(replace, text)
            masked.append(text)
        cells.append(masked)
    return cells


def differences(saved, fresh, rules) -> list[str]:
    """Human-readable differences between two notebooks' masked outputs (empty: the same)."""
    a, b = _comparable(saved, rules), _comparable(fresh, rules)
    problems = []
    if len(a) != len(b):
        return [f"{len(a)} code cells saved, {len(b)} run"]
    for i, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            import difflib

            diff = "\n".join(
                difflib.unified_diff(
                    "\n".join(x).splitlines(), "\n".join(y).splitlines(), "saved", "fresh", lineterm="", n=1
                )
            )
            problems.append(f"code cell {i}:\n{diff[:3000]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebook numbers or names (default: all)")
    parser.add_argument("--check", action="store_true", help="run and compare with the saved outputs; write nothing")
    args = parser.parse_args(argv)

    import nbformat

    chosen = notebooks(args.names)
    if not chosen:
        print("no notebooks found", file=sys.stderr)
        return 1
    rules = sanitize_rules() if args.check else []
    failed = 0
    total = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sessionkit-notebooks-") as tmp:
        env = kernel_env(Path(tmp) / "jupyter")
        for path in chosen:
            work = fresh_copy(Path(tmp) / path.stem)
            started = time.monotonic()
            try:
                nb = execute(work / path.name, work, env)
            except Exception as exc:  # a failing cell: say which notebook and keep going
                failed += 1
                message = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
                print(f"FAILED  {path.name}: {type(exc).__name__}: {message[-2000:]}", file=sys.stderr)
                continue
            took = time.monotonic() - started
            if args.check:
                saved = nbformat.read(str(path), as_version=4)
                problems = differences(saved, nb, rules)
                if problems:
                    failed += 1
                    print(f"DIFFERS {path.name} ({took:.1f} s)\n" + "\n".join(problems[:3]))
                else:
                    print(f"same    {path.name} ({took:.1f} s)")
                continue
            nbformat.validate(nb)
            text = nbformat.writes(copy.deepcopy(nb))
            if WIDGET_STATE in text or '"widgets"' in json.dumps(nb.metadata):
                raise SystemExit(f"{path.name}: widget state survived cleaning")
            path.write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
            print(f"wrote   {path.name} ({took:.1f} s)")
    print(f"{len(chosen) - failed}/{len(chosen)} notebooks ok in {time.monotonic() - total:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
