"""Build the Kaggle dataset that installs reasonkit and its tested stack offline on a TPU VM.

    python scripts/kaggle_dataset.py --id <your-kaggle-name>/reasonkit-wheels
    kaggle datasets create -p build/kaggle-dataset     # later: kaggle datasets version -p ...

The folder holds reasonkit's wheel, the wheels of requirements-tpu.txt (the pinned stack,
jax[tpu] and libtpu included) for Linux x86_64 and Python 3.11 and 3.12 (Kaggle's TPU image
is 3.12), reasonkit_bootstrap.py at its top (what the notebooks' first cell imports) and
dataset-metadata.json. Attached to a notebook (Add Input), the first cell finds the wheel in
/kaggle/input/<dataset>/ and installs from that folder with ``--no-index``: no network, no
package index. It downloads about 1 GB; run it by hand, where pip reaches the package index.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
from typing import Callable, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import reasonkit_bootstrap as boot  # noqa: E402 - the pins and platforms live there


def pip(args: Sequence[str]) -> int:
    """``python -m pip <args>``, its output shown."""
    print("$ pip", " ".join(args), flush=True)
    return subprocess.run([sys.executable, "-m", "pip", *args]).returncode


def build(out: pathlib.Path, dataset_id: str, *, repo: pathlib.Path = ROOT,
          pythons: Sequence[str] = boot.PYTHONS,
          run: Callable[[Sequence[str]], int] = pip) -> pathlib.Path:
    """Fill ``out`` (new or empty) with the dataset; ``run(args)`` runs pip."""
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty: remove it or pick another --out")
    if "/" not in dataset_id or dataset_id.count("/") != 1:
        raise SystemExit(f"--id {dataset_id!r}: must be <kaggle user name>/<dataset name>")
    out.mkdir(parents=True, exist_ok=True)

    def step(args: list[str], what: str) -> None:
        if run(args) != 0:
            raise SystemExit(f"pip failed to {what} (its messages are above)")

    step(["wheel", str(repo), "--no-deps", "--wheel-dir", str(out)], "build reasonkit's wheel")
    for name, (version, _) in boot.SDIST_ONLY.items():  # pure Python, only on the index as source
        step(["wheel", f"{name}=={version}", "--no-deps", "--wheel-dir", str(out)], f"build {name}")
    for python in pythons:
        args = ["download", "--dest", str(out), "--find-links", str(out), "--only-binary=:all:",
                "--python-version", python, "-r", str(repo / "requirements-tpu.txt")]
        step(args + [a for p in boot.PLATFORMS for a in ("--platform", p)],
             f"download the stack for Python {python}")
    shutil.copy(repo / "reasonkit_bootstrap.py", out)
    (out / "dataset-metadata.json").write_text(json.dumps({
        "title": "reasonkit wheels", "id": dataset_id, "licenses": [{"name": "apache-2.0"}],
        "subtitle": "reasonkit and its tested JAX / Tunix stack for TPU VMs, offline"}, indent=2))
    wheels = sorted(out.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    print(f"{out}: {len(wheels)} wheels, {size / 2**30:.2f} GiB; next: kaggle datasets create -p {out}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--id", required=True, help="<kaggle user name>/<dataset name>")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "build" / "kaggle-dataset")
    ap.add_argument("--python", nargs="+", default=list(boot.PYTHONS))
    args = ap.parse_args(argv)
    build(args.out, args.id, pythons=args.python)


if __name__ == "__main__":
    main()
