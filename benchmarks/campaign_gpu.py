"""A campaign's GPU seeds, run on a lent GPU machine (the ``device`` tool), and their raw results brought back.

    python -m benchmarks.campaign_gpu pack-assets NAME        # here: assets and wheels in parts; prints the calls
    bash benchmarks/campaigns/gpu.sh NAME [MINUTES]            # there, one call per part, back to back
    python -m benchmarks.campaign_gpu unpack NAME FILE.tar.gz  # here: into benchmarks/results/campaigns/NAME/

**Which seeds run where.** CPU and GPU runs of one recipe do not give identical numbers, and a seed's runs must share
one predecessor (`benchmarks.compare.same_predecessor`), whose checkpoint stays on the machine that fine-tuned it
(hundreds of MB: it cannot travel back). So a whole seed runs on one device, its predecessor and every method and
setting: a cell's ``gpu_seeds`` (campaign JSON) are the GPU's, its other seeds the CPU's, and a cell that takes its
predecessors from another (``predecessor_from``) follows that cell. ``benchmarks.campaign run`` starts only its
device's seeds (``--device``, default ``cpu``: the runner here never starts a GPU seed, and the GPU path never a CPU
one); every archived run records its device (``campaign_device`` in ``provenance.json``, beside ``environment``, which
names the GPU and CUDA version); ``status`` counts per device, and a done run whose seed has since changed device
stops ``run`` (move a seed only before its first run is archived). Every comparison is thereby paired on one device;
a grid's mean over seeds or a seed-level interval may mix devices, as it mixes machines. A cell that matches compute
(``compute_matched``) stays on the CPU, where its run costs are timed.

**A GPU session** has 15 minutes of device time, calls of at most 10 minutes, and a machine that stays warm 30 s after a
call; each call takes the working tree (tracked and untracked-not-ignored files, about 20 MiB) plus up to 8 ignored
paths (``carry``), 64 MiB in all, and brings back what the command leaves in ``$OUT``. The assets a campaign's runs read
(`Campaign.assets`: MiniLM alone is 87 MiB, Fashion-MNIST 30 MiB) and the wheels the machine lacks (`WHEELS`) do not fit
one call: ``pack-assets`` writes them as one gzipped tar cut into ``.gpu-assets/part1``, ``part2``, ... (ignored by
``.gitignore``), each small enough to travel beside the working tree, with a manifest (the sha256 of every chunk, of the
whole stream and of every file in it, and the commit here). Each call carries one part and runs the same command;
``gpu.sh`` (`receive`) keeps the parts that arrived (ignored paths stay on a warm machine), says which are missing and
exits, and once all are there checks every checksum, unpacks the assets into ``.gpu-assets/cache`` (``$THESEUS_CACHE``)
and the wheels into ``.gpu-assets/site``, then runs. A machine given back between calls loses the earlier parts:
``gpu.sh`` then names them, and the calls start again from part 1.

**On the machine** ``gpu.sh`` prints the versions (python 3.12, torch 2.11 and transformers 5.17 there; 3.11, 2.14
and 5.24 here) and stops at once if an import the campaign needs fails or no GPU is seen (`check`); then runs
``benchmarks.campaign run NAME --device gpu --jobs 4 --threads 4``: four processes share the one GPU, four CPU
threads each on the 16 cores. A MiniLM step (batch 32, 6 or 2 layers of width 384) is a few milliseconds of GPU work
against as much Python, kernel launches and data handling on the CPU, so one process leaves the GPU mostly idle and
several overlap; four keep every core busy without oversubscribing (``JOBS``/``THREADS`` override). A run starts
only if it should finish before the call ends (``--finish-hours``: as long as the longest GPU run archived so far,
``RUN_MINUTES`` before any), a ``timeout`` ends what is still running, and `pack_results` packs every GPU run's
``report.json`` and ``provenance.json`` into ``$OUT/campaign-NAME.tar.gz`` (paths relative to the campaign's
archive, ``<cell>/<method>/<setting>/seed<N>/``), with the log and the runs' logs beside it. A seed continued in a
later session fine-tunes its predecessor again, on another machine, and must match its archived runs' predecessor,
or the campaign stops.

**Back here** `unpack` checks everything before it writes anything: every member is a run's report or provenance of a
GPU seed of the campaign, recorded as run on the GPU (not a CPU test of this path: ``--allow-cpu``); a run already
archived with the same bytes is skipped (unpacking twice changes nothing), one with other bytes refuses the whole
archive; each new run's predecessor matches its seed's archived runs. Then commit the results.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTS = ROOT / ".gpu-assets"
"""Where ``pack-assets`` writes the parts and the machine unpacks them (``.gitignore`` ignores it)."""
MANIFEST = "manifest.json"
STREAM = "assets.tar.gz"
MIB = 1 << 20
CALL_BYTES = 64 * MIB
"""What one call of the device tool takes: the working tree and its carried paths together."""
MARGIN_BYTES = 2 * MIB
"""Left free in each call beside the working tree and a part (results archived between packing and the calls)."""
WHEELS = ("datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19")
"""What the machines lack (the text tasks build their splits with ``datasets``); their pyarrow, pandas, xxhash, tqdm
and huggingface_hub are there."""
FAMILY_MODULES = {
    "bert": ("transformers", "accelerate", "datasets"),
    "causal_lm": ("transformers", "accelerate", "datasets"),
    "gnn": ("torch_geometric",),
    "resnet": ("torchvision", "timm"),
    "toy": (),
}
"""What a family's runs import, checked before any run starts (`check`)."""
WAITING = 3
"""`receive`'s exit status while parts are missing (``gpu.sh`` then exits 0: the next call brings the next part)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------------------------- here: the assets
def travelling_bytes(root: Path = ROOT) -> int:
    """The size of what every call sends besides its carried paths: tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    return sum((root / name).stat().st_size for name in listed.decode().split("\0") if name and (root / name).is_file())


def download_wheels(target: Path, wheels: tuple[str, ...] = WHEELS) -> list[Path]:
    """``pip download`` of ``wheels`` for the machines' Python (3.12, x86-64), without their dependencies."""
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version=3.12", "--implementation=cp", *platforms, "-d", str(target), *wheels]
    subprocess.run(command, check=True)
    return sorted(target.glob("*.whl"))


def pack_assets(
    campaign: Any,
    parts: Path = PARTS,
    *,
    assets: list[str] | None = None,
    wheels: tuple[str, ...] = WHEELS,
    part_bytes: int | None = None,
) -> list[Path]:
    """Writes the assets ``campaign`` needs (`Campaign.assets`, or ``assets``) and ``wheels`` as one gzipped tar cut
    into ``parts``/``part1``, ``part2``, ... of at most ``part_bytes`` each (default: what a call leaves beside the
    working tree, `travelling_bytes`), each with the manifest (module doc); replaces older parts. Returns the parts.

    Raises:
        theseus_zoo.data.assets.MissingAssetError: an asset is not in the cache here (``theseus fetch NAME``).
        ValueError: ``parts`` is inside the repository but not ignored (it would travel in every call), or a call
            has no room left for a part.
    """
    from theseus_zoo.data.assets import asset_path

    from .harness import source_commit

    assets = campaign.assets() if assets is None else assets
    parts = Path(parts).resolve()
    parts.mkdir(parents=True, exist_ok=True)  # git tells an ignored folder only once it exists
    ignored = (
        subprocess.run(["git", "check-ignore", "-q", str(parts)], cwd=ROOT) if parts.is_relative_to(ROOT) else None
    )
    if ignored is not None and ignored.returncode == 1:
        raise ValueError(f"{parts} is not ignored by git: every call would send it (add it to .gitignore)")
    if part_bytes is None:
        part_bytes = CALL_BYTES - travelling_bytes() - MARGIN_BYTES
        if part_bytes < MIB:
            raise ValueError(f"the working tree leaves {part_bytes} bytes of a call's {CALL_BYTES}: no room for assets")
    stream, files = io.BytesIO(), {}
    with tempfile.TemporaryDirectory() as downloads, tarfile.open(fileobj=stream, mode="w:gz", compresslevel=1) as tar:
        sources = [
            (path, f"assets/{name}/{path.relative_to(asset_path(name))}")
            for name in assets
            for path in sorted(asset_path(name).rglob("*"))
            if path.is_file()
        ]
        if wheels:
            sources += [(path, f"wheels/{path.name}") for path in download_wheels(Path(downloads), wheels)]
        for path, name in sources:
            files[name] = sha256(path.read_bytes())
            tar.add(path, arcname=name, recursive=False)
    data = stream.getvalue()
    count = max(1, math.ceil(len(data) / part_bytes))
    size = math.ceil(len(data) / count)
    chunks = [data[k * size : (k + 1) * size] for k in range(count)]
    manifest = {
        "campaign": campaign.name,
        "commit": source_commit(),
        "assets": assets,
        "wheels": list(wheels),
        "stream_sha256": sha256(data),
        "parts": [
            {"name": f"part{k + 1}", "bytes": len(chunk), "sha256": sha256(chunk)} for k, chunk in enumerate(chunks)
        ],
        "files": files,
    }
    shutil.rmtree(parts, ignore_errors=True)
    written = []
    for k, chunk in enumerate(chunks):
        folder = parts / f"part{k + 1}"
        folder.mkdir(parents=True)
        (folder / f"{STREAM}.{k + 1}").write_bytes(chunk)
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        written.append(folder)
    return written


def device_calls(name: str, parts: list[Path], minutes: int = 8) -> str:
    """The ``device`` tool's calls that run campaign ``name`` with these parts, back to back."""
    lines = [
        f"{len(parts)} call(s) of the device tool's run, each at once after the last (the machine stays warm 30 s), "
        "from the repository root here:"
    ]
    for k, part in enumerate(parts, 1):
        last = k == len(parts)
        lines.append(
            f"  {k}. carry: [{json.dumps(str(part.relative_to(ROOT)) if part.is_relative_to(ROOT) else str(part))}], "
            f"timeout_s: {minutes * 60 + 60 if last else 300}, command: bash benchmarks/campaigns/gpu.sh {name} "
            f"{minutes}" + ("   (runs; $OUT/campaign-" + name + ".tar.gz comes back)" if last else "   (receives)")
        )
    lines.append(f"then here: python -m benchmarks.campaign_gpu unpack {name} <files_at>/campaign-{name}.tar.gz")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- there: receiving
def receive(parts: Path = PARTS) -> tuple[bool, str]:
    """Checks the parts in ``parts``; once all are there and every checksum matches, unpacks the assets into
    ``parts``/``cache`` and installs the wheels into ``parts``/``site`` (once per pack), and writes ``parts``/``env.sh``
    (``THESEUS_CACHE``, ``PYTHONPATH``, ``THESEUS_SOURCE_COMMIT``). Returns (ready, what it found).

    Raises:
        ValueError: no parts, parts of two packs, or a checksum that does not match (the files are not byte-exact).
    """
    manifests = [json.loads(path.read_text()) for path in sorted(Path(parts).glob(f"part*/{MANIFEST}"))]
    if not manifests:
        raise ValueError(f"no parts in {parts}: run python -m benchmarks.campaign_gpu pack-assets NAME here first")
    if len({manifest["stream_sha256"] for manifest in manifests}) > 1:
        raise ValueError(f"{parts} holds parts of two packs: carry the parts of the last pack, from part 1")
    manifest = manifests[0]
    present, chunks = [], []
    for k, part in enumerate(manifest["parts"], 1):
        path = Path(parts) / part["name"] / f"{STREAM}.{k}"
        if path.exists():
            chunk = path.read_bytes()
            if len(chunk) != part["bytes"] or sha256(chunk) != part["sha256"]:
                raise ValueError(f"{path}: sha256 {sha256(chunk)} is not the manifest's {part['sha256']}")
            present.append(part["name"])
            chunks.append(chunk)
    missing = [part["name"] for part in manifest["parts"] if part["name"] not in present]
    if missing:
        return False, (
            f"asset parts here: {', '.join(present)}; missing: {', '.join(missing)} (carry the next one in the next "
            "call at once; a machine given back between calls has lost the earlier ones: start again from part 1)"
        )
    cache, site, marker = Path(parts) / "cache", Path(parts) / "site", Path(parts) / "received"
    if not marker.exists() or marker.read_text().strip() != manifest["stream_sha256"]:
        data = b"".join(chunks)
        if sha256(data) != manifest["stream_sha256"]:
            raise ValueError(f"the parts joined have sha256 {sha256(data)}, not the manifest's")
        with tempfile.TemporaryDirectory(dir=parts) as scratch:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                tar.extractall(scratch, filter="data")
            for name, digest in manifest["files"].items():
                if sha256((Path(scratch) / name).read_bytes()) != digest:
                    raise ValueError(f"{name}: its sha256 is not the manifest's")
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(site, ignore_errors=True)
            cache.mkdir(parents=True)
            for asset in manifest["assets"]:
                shutil.move(Path(scratch) / "assets" / asset, cache / asset)
            wheels = sorted(str(path) for path in (Path(scratch) / "wheels").glob("*.whl"))
            if wheels:
                pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
                subprocess.run([*pip, "--no-cache-dir", "--target", str(site), *wheels], check=True)
        marker.write_text(manifest["stream_sha256"] + "\n")
    python_path = os.pathsep.join([str(ROOT), str(site.resolve())])
    (Path(parts) / "env.sh").write_text(
        f"export THESEUS_CACHE={cache.resolve()}\nexport PYTHONPATH={python_path}\n"
        f"export THESEUS_SOURCE_COMMIT={manifest['commit']}\n"
    )
    files = len(manifest["files"])
    return True, f"asset parts here: all {len(present)}, {files} files byte-exact (sha256); commit {manifest['commit']}"


def check(campaign: Any, allow_cpu: bool = False) -> list[str]:
    """Imports what the campaign's families need and returns the versions and the GPU, one line each.

    Raises:
        RuntimeError: an import fails, or no GPU is seen (unless ``allow_cpu``: a CPU test of this path).
    """
    import importlib
    import platform

    import torch

    from theseus_zoo.recipes import get_recipe

    lines = [f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda})"]
    if torch.cuda.is_available():
        lines.append(f"GPU: {torch.cuda.get_device_name()}, {torch.cuda.device_count()} visible")
    elif not allow_cpu:
        raise RuntimeError("no GPU is visible to torch: this path runs the campaign's GPU seeds on a GPU only")
    else:
        lines.append("no GPU: a CPU test of the GPU path (its results are refused by unpack without --allow-cpu)")
    modules = {"theseus_zoo.cli", "theseus_zoo.training.runners"}
    for cell in campaign.cells.values():
        modules.update(FAMILY_MODULES.get(get_recipe(cell["recipe"]).family, ()))
    for module in sorted(modules):
        try:
            imported = importlib.import_module(module)
        except Exception as error:  # any failure to import is the same news: the runs would fail
            raise RuntimeError(f"import {module} failed: {type(error).__name__}: {error}") from error
        if "." not in module:
            lines.append(f"{module} {getattr(imported, '__version__', '?')}")
    return lines


# ----------------------------------------------------------------------------------------------- there: packing results
def pack_results(campaign: Any, out: Path) -> tuple[Path, int]:
    """Packs every GPU run archived for ``campaign`` (its report and provenance) into ``out``/``campaign-NAME.tar.gz``,
    paths relative to the campaign's archive, and the runs' logs into ``out``/``logs-NAME.tar.gz``. Returns the
    archive and the number of runs in it. A run whose report does not load (cut by the time limit) is left out."""
    from theseus_zoo.training.results import REPORT, Report

    from .campaign_plan import PROVENANCE

    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"campaign-{campaign.name}.tar.gz"
    count = 0
    with tarfile.open(archive, "w:gz") as tar:
        for run in campaign.runs():
            folder = campaign.archive / run.path
            if campaign.archived_device(run) != "gpu" or not (folder / PROVENANCE).exists():
                continue
            try:
                Report.load(folder / REPORT)
                json.loads((folder / PROVENANCE).read_text())
            except (OSError, ValueError, KeyError, TypeError):
                continue
            for name in (REPORT, PROVENANCE):
                tar.add(folder / name, arcname=str(PurePosixPath(*run.path.parts, name)), recursive=False)
            count += 1
    with tarfile.open(out / f"logs-{campaign.name}.tar.gz", "w:gz") as tar:
        for log in sorted(campaign.runs_root.rglob("*.log")):
            tar.add(log, arcname=str(log.relative_to(campaign.runs_root)), recursive=False)
    return archive, count


# ----------------------------------------------------------------------------------------------- here: unpacking
def unpack(campaign: Any, archive: Path, *, allow_cpu: bool = False) -> dict[str, int]:
    """Adds the runs in ``archive`` (from `pack_results`) to ``campaign``'s archive, after checking all of them
    (module doc); returns how many were ``new`` and how many already there, the ``same``.

    Raises:
        ValueError: a member that is not a GPU run's report or provenance of this campaign, a run recorded on the
            CPU (without ``allow_cpu``), a run archived here with other bytes, or a predecessor that differs from
            its seed's archived runs; nothing is written then.
    """
    from theseus_zoo.training.results import REPORT

    from .campaign_plan import PROVENANCE, CampaignRun
    from .compare import predecessor_outputs, same_predecessor

    incoming: dict[CampaignRun, dict[str, bytes]] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            path = PurePosixPath(member.name)
            parts = path.parts
            if (
                not member.isfile()
                or path.is_absolute()
                or len(parts) != 5
                or ".." in parts
                or parts[0] not in campaign.cells
                or parts[1] not in campaign.methods_of(parts[0])
                or parts[4] not in (REPORT, PROVENANCE)
                or not parts[3].startswith("seed")
                or not parts[3][4:].isdigit()
            ):
                raise ValueError(f"{archive}: {member.name} is not a run's {REPORT} or {PROVENANCE} of {campaign.name}")
            run = CampaignRun(parts[0], parts[1], parts[2], int(parts[3][4:]))
            incoming.setdefault(run, {})[parts[4]] = tar.extractfile(member).read()
    new, same = [], 0
    for run, files in sorted(incoming.items()):
        if set(files) != {REPORT, PROVENANCE}:
            raise ValueError(f"{archive}: {run} lacks its {REPORT} or {PROVENANCE}")
        if campaign.device_of(run) != "gpu":
            raise ValueError(f"{run}: seed {run.seed} of {run.cell} is the CPU's (not in gpu_seeds), not the GPU's")
        provenance = json.loads(files[PROVENANCE])
        if provenance.get("campaign_device") != "gpu":
            raise ValueError(f"{run}: its provenance does not say it ran on the GPU path")
        if provenance["environment"].get("device") == "cpu" and not allow_cpu:
            raise ValueError(f"{run} ran on a CPU (a test of the GPU path): refused without --allow-cpu")
        folder = campaign.archive / run.path
        existing = {name: (folder / name).read_bytes() for name in files if (folder / name).exists()}
        if existing == files:
            same += 1
        elif existing:
            raise ValueError(f"{run}: archived already with other bytes in {folder}: nothing was unpacked")
        else:
            new.append(run)
    references: dict[tuple[str, int], Any] = {}
    for run in campaign.runs():  # the archived runs' predecessors, one a seed
        if campaign.done(run):
            outputs = predecessor_outputs(json.loads((campaign.archive / run.path / REPORT).read_text()))
            references.setdefault(campaign.predecessor_key(run), outputs)
    for run in new:
        outputs = predecessor_outputs(json.loads(incoming[run][REPORT]))
        reference = references.setdefault(campaign.predecessor_key(run), outputs)
        if not same_predecessor(outputs, reference):
            raise ValueError(f"{run}: its predecessor differs from its seed's archived runs': nothing was unpacked")
    for run in new:
        folder = campaign.archive / run.path
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in incoming[run].items():
            partial = folder / f".{name}.partial"
            partial.write_bytes(data)
            partial.replace(folder / name)
    return {"new": len(new), "same": same}


# ----------------------------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pack = commands.add_parser("pack-assets", help="here: the campaign's assets and wheels, in parts (module doc)")
    pack.add_argument("name")
    pack.add_argument("--part-mib", type=float, help="the most a part holds (default: what a call leaves)")
    pack.add_argument("--no-wheels", action="store_true", help=f"leave out {', '.join(WHEELS)}")
    pack.add_argument("--minutes", type=int, default=8, help="the last call's minutes (default: 8)")
    commands.add_parser("receive", help="there: check and unpack the parts (exit 3 while some are missing)")
    checking = commands.add_parser("check", help="there: versions, imports and the GPU")
    checking.add_argument("name")
    checking.add_argument("--allow-cpu", action="store_true", help="a CPU test of this path")
    results = commands.add_parser("pack-results", help="there: the GPU runs' raw results into OUT")
    results.add_argument("name")
    results.add_argument("--out", type=Path, required=True)
    unpacking = commands.add_parser("unpack", help="here: a pack-results archive into the campaign's archive")
    unpacking.add_argument("name")
    unpacking.add_argument("file", type=Path)
    unpacking.add_argument("--allow-cpu", action="store_true", help="accept runs of a CPU test of this path")
    for sub in (pack, checking, results, unpacking):
        sub.add_argument("--parts", type=Path, default=PARTS, help=argparse.SUPPRESS)
        sub.add_argument("--campaigns", type=Path, help="the campaigns' folder (default: benchmarks/campaigns)")
        sub.add_argument("--archive", type=Path, help="the archive (default: benchmarks/results/campaigns)")
        sub.add_argument("--runs", type=Path, help="the runs' folder (default: runs/campaigns)")
    args = parser.parse_args(argv)
    try:
        if args.command == "receive":
            ready, found = receive(PARTS)
            print(f"gpu.sh: {found}", flush=True)
            return 0 if ready else WAITING
        from .campaign import ARCHIVE, CAMPAIGNS, Campaign

        campaign = Campaign.load(
            (args.campaigns or CAMPAIGNS) / f"{args.name}.json", archive=args.archive or ARCHIVE, runs_root=args.runs
        )
        if args.command == "pack-assets":
            part_bytes = None if args.part_mib is None else int(args.part_mib * MIB)
            written = pack_assets(campaign, args.parts, wheels=() if args.no_wheels else WHEELS, part_bytes=part_bytes)
            print(device_calls(campaign.name, written, args.minutes))
        elif args.command == "check":
            print("\n".join(f"gpu.sh: {line}" for line in check(campaign, args.allow_cpu)), flush=True)
        elif args.command == "pack-results":
            archive, count = pack_results(campaign, args.out)
            print(f"gpu.sh: {count} GPU runs of {campaign.name} in {archive}")
        else:
            counts = unpack(campaign, args.file, allow_cpu=args.allow_cpu)
            new, same = counts["new"], counts["same"]
            print(f"{campaign.name}: {new} runs unpacked into {campaign.archive}, {same} were there already")
    except (ValueError, RuntimeError, OSError, subprocess.CalledProcessError) as error:
        print(f"campaign_gpu: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
