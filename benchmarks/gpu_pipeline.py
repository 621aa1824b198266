"""The Promptagator pipeline on the device machine (issue 16 item 5: its wall time on SciFact on a GPU).

The device has no network, none of Ferret's models and at most 64 MiB per call, while the generator (SmolLM2 GGUF,
98 MB), MiniLM (34 MB packed) and Ferret's missing dependencies (28 MB of wheels) come to ~160 MB. So they travel
in three calls to one warm machine, each stashing its part under a folder outside the repository, and the last call
runs ``benchmarks/search_configs.py`` (the pipeline's own stages: generate, filter, train, guard, index, then the
configuration tuning, the reranker and the test-split table) there:

    # here (.gpu/ and .whl/ listed in .git/info/exclude)
    python benchmarks/gpu_pipeline.py prepare --dataset ../shared/datasets/scifact --out .gpu
    for w in <the wheels it prints, pinned as in this venv>; do python -m pip download --no-deps \
        --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 \
        --platform manylinux_2_28_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 -d .whl $w; done
    mv .whl/{sqlalchemy,openai,pydantic_core,selectolax}-*.whl .gpu/b/wheels/    # each call under 64 MiB
    # there, three calls in a row (the machine stays warm 30 s between calls), carrying .gpu/a, then .gpu/b, then
    # .gpu/c and .whl:
    python3 benchmarks/gpu_pipeline.py stash --part .gpu/a --keep /root/keep
    python3 benchmarks/gpu_pipeline.py stash --part .gpu/b --keep /root/keep
    python3 benchmarks/gpu_pipeline.py stash --part .gpu/c --keep /root/keep && \\
        python3 benchmarks/gpu_pipeline.py setup --keep /root/keep && . /root/keep/env.sh && \\
        python3 benchmarks/search_configs.py --dataset /root/keep/data/scifact --home /root/keep/home ...

The generator is SmolLM2's GGUF itself (transformers dequantises it on the GPU, as on a CPU); the encoder is MiniLM
with its word-embedding matrix rounded to int8 per row, the rest fp16 (``gpu_speed.pack_model``), restored to fp32.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEELS = (
    "alembic Mako bm25s gguf pydantic pydantic_core pydantic-settings python-dotenv typing-inspection annotated-types "
    "PyStemmer selectolax SQLAlchemy greenlet datasets dill multiprocess typing-extensions qdrant-edge-py "
    "qdrant-client openai distro jiter sniffio"
)
"""Ferret's imports that the device image lacks (its package list: /work/.library/device/KINDS.md)."""


def prepare(args: argparse.Namespace) -> None:
    from ferret.core.llm.local_backend import default_generator_path
    from gpu_speed import pack_model

    out: Path = args.out
    shutil.rmtree(out, ignore_errors=True)
    for part in "abc":
        (out / part).mkdir(parents=True)
    data = default_generator_path().read_bytes()
    middle = len(data) // 2
    (out / "a" / f"{GGUF}.0").write_bytes(data[:middle])
    (out / "b" / f"{GGUF}.1").write_bytes(data[middle:])
    (out / "b" / "wheels").mkdir()  # the larger wheels travel here, so that .gpu/c and .whl stay under 64 MiB
    with tarfile.open(out / "a" / "data.tar.xz", "w:xz") as tar:
        for dataset in args.dataset:
            tar.add(dataset, arcname=Path(dataset).name)
    pack_model(out / "c")
    for part in "abc":
        size = sum(f.stat().st_size for f in (out / part).rglob("*") if f.is_file())
        print(f"{out / part}: {size / 2**20:.1f} MiB")
    print(f"wheels to download into .whl (Python 3.12, manylinux x86-64, pinned as in this venv): {WHEELS}")


def stash(args: argparse.Namespace) -> None:
    args.keep.mkdir(parents=True, exist_ok=True)
    shutil.copytree(args.part, args.keep, dirs_exist_ok=True)
    print(f"stashed {sorted(p.name for p in args.part.iterdir())} in {args.keep}", flush=True)


def setup(args: argparse.Namespace) -> None:
    from gpu_speed import restore_model

    keep: Path = args.keep
    gguf = keep / GGUF
    if not gguf.exists():
        with gguf.open("wb") as handle:
            for index in (0, 1):
                handle.write((keep / f"{GGUF}.{index}").read_bytes())
    model = keep / "minilm"
    if not (model / "model.safetensors").exists():
        restore_model(keep, model)
    if not (keep / "data").exists():
        with tarfile.open(keep / "data.tar.xz") as tar:
            tar.extractall(keep / "data", filter="data")
    site = Path("/tmp/site")
    if not site.exists():
        wheels = sorted(str(w) for w in [*Path(".whl").glob("*.whl"), *(keep / "wheels").glob("*.whl")])
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
             "--no-cache-dir", "--upgrade", "--target", str(site), *wheels],
            check=True,
        )  # fmt: skip
    (keep / "env.sh").write_text(
        f"export PYTHONPATH={site}:platform:connectors:workers:ui FERRET_BASE_MODEL={model} "
        f"FERRET_GENERATOR_MODEL={gguf} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1\n"
    )
    print(f"ready: {gguf} ({gguf.stat().st_size} bytes), {model}, {sorted(p.name for p in (keep / 'data').iterdir())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("prepare")
    make.add_argument("--dataset", type=Path, action="append", required=True)
    make.add_argument("--out", type=Path, required=True)
    put = commands.add_parser("stash")
    put.add_argument("--part", type=Path, required=True)
    put.add_argument("--keep", type=Path, required=True)
    ready = commands.add_parser("setup")
    ready.add_argument("--keep", type=Path, required=True)
    args = parser.parse_args()
    {"prepare": prepare, "stash": stash, "setup": setup}[args.command](args)


if __name__ == "__main__":
    main()
