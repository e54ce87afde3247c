"""Fashion-MNIST from its idx files, and fixed splits that neither the run seed nor a library version changes.

The idx files come from the ``fashion-mnist`` asset (``theseus fetch fashion-mnist``) or any folder holding them,
gzipped or not. The 60,000 training images are ordered by ``sha256(f"{data_seed}:{i}")``: the first ``dev_size``
form ``dev``, the next ``train_size`` (default: all the rest) ``train``; ``test`` is the official 10,000-image test
set (or a fixed subset of ``test_size`` images, chosen by the same kind of key).
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

import torch

ASSET = "fashion-mnist"
FILES = {  # split of the official distribution: (images, labels), each possibly with ".gz"
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
NUM_CLASSES = len(CLASS_NAMES)
MEAN, STD = 0.2860, 0.3530  # of the 60,000 training images' pixels scaled to [0, 1]


def read_idx(path: str | Path) -> torch.Tensor:
    """The array in an idx file of unsigned bytes (all of (Fashion-)MNIST's files), gzipped (``.gz``) or not.

    Returns:
        A ``torch.uint8`` tensor of the shape the header gives: ``(N, 28, 28)`` for images, ``(N,)`` for labels.

    Raises:
        ValueError: not an idx file of unsigned bytes, or one whose size disagrees with its header.
    """
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise ValueError(f"{path} is not a readable gzip file ({error}); fetch the data again") from None
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] != 0x08:
        raise ValueError(
            f"{path} is not an idx file of unsigned bytes (magic {data[:4].hex() or 'missing'}, expected 000008..); "
            f"give the Fashion-MNIST idx files"
        )
    dims = data[3]
    header = 4 + 4 * dims
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    expected = 1
    for size in shape:
        expected *= size
    if len(data) < header or len(data) - header != expected:
        raise ValueError(
            f"{path}: the header gives shape {tuple(shape)}, but the file holds {len(data) - header} bytes"
        )
    return torch.frombuffer(bytearray(data[header:]), dtype=torch.uint8).reshape(shape)


def find_files(directory: str | Path) -> dict[str, tuple[Path, Path]]:
    """Per official split (``train``, ``test``), the paths of its images and labels files in ``directory``
    (``name.gz`` or ``name``). Raises `ValueError` naming the first file missing."""
    directory = Path(directory)
    found = {}
    for split, names in FILES.items():
        paths = []
        for name in names:
            candidates = [directory / f"{name}.gz", directory / name]
            path = next((candidate for candidate in candidates if candidate.is_file()), None)
            if path is None:
                raise ValueError(
                    f"{directory} holds no {name}.gz (nor {name}); give data_dir a folder with the four "
                    f"Fashion-MNIST idx files, or leave it unset for the cached asset"
                )
            paths.append(path)
        found[split] = (paths[0], paths[1])
    return found


def read_fashion_mnist(directory: str | Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The official ``train`` and ``test`` sets in ``directory``: ``(images, labels)`` with images
    ``uint8 (N, 28, 28)`` and labels ``int64 (N,)`` in ``[0, 10)``. Raises `ValueError` for bad files."""
    data = {}
    for split, (images_path, labels_path) in find_files(directory).items():
        images, labels = read_idx(images_path), read_idx(labels_path)
        if images.dim() != 3 or labels.dim() != 1 or len(images) != len(labels):
            raise ValueError(
                f"{images_path} and {labels_path} must hold (N, height, width) images and N labels, "
                f"got shapes {tuple(images.shape)} and {tuple(labels.shape)}"
            )
        if len(labels) and int(labels.max()) >= NUM_CLASSES:
            raise ValueError(f"{labels_path} holds label {int(labels.max())}; Fashion-MNIST has {NUM_CLASSES} classes")
        data[split] = (images, labels.long())
    return data


def split_order(size: int, seed: int, salt: str = "") -> list[int]:
    """Indices ``0 … size-1`` ordered by ``sha256(f"{salt}{seed}:{i}")``: a fixed shuffle that no library
    version changes."""
    return sorted(range(size), key=lambda i: hashlib.sha256(f"{salt}{seed}:{i}".encode()).digest())


class ImageSplit(Sequence):
    """A split as a sequence of ``(image, label)`` examples: image ``uint8 (28, 28)``, label an ``int``.

    ``images`` and ``labels`` hold the whole split as two tensors, for evaluation in large batches.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    @overload
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]: ...

    @overload
    def __getitem__(self, index: slice) -> ImageSplit: ...

    def __getitem__(self, index: int | slice) -> tuple[torch.Tensor, int] | ImageSplit:
        if isinstance(index, slice):
            return ImageSplit(self.images[index], self.labels[index])
        return self.images[index], int(self.labels[index])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        return (self[i] for i in range(len(self)))


def make_splits(
    data: dict[str, tuple[torch.Tensor, torch.Tensor]],
    *,
    dev_size: int,
    train_size: int | None = None,
    test_size: int | None = None,
    data_seed: int = 0,
) -> dict[str, ImageSplit]:
    """``train``, ``dev`` and ``test`` from the official sets, as the module docstring describes (each split
    in ascending file order). Raises `ValueError` when the sizes ask for more images than there are."""
    train_images, train_labels = data["train"]
    test_images, test_labels = data["test"]
    if dev_size + (train_size or 1) > len(train_labels):
        raise ValueError(
            f"dev_size={dev_size} plus train_size={train_size} asks for more than the {len(train_labels)} images of "
            f"the training set; choose smaller sizes"
        )
    if (test_size or 0) > len(test_labels):
        raise ValueError(f"test_size={test_size} asks for more than the {len(test_labels)} test images; choose fewer")
    order = split_order(len(train_labels), data_seed)
    dev = sorted(order[:dev_size])
    train = sorted(order[dev_size:] if train_size is None else order[dev_size : dev_size + train_size])
    test = list(range(len(test_labels)))
    if test_size is not None:
        test = sorted(split_order(len(test_labels), data_seed, salt="test:")[:test_size])
    return {
        "train": ImageSplit(train_images[train], train_labels[train]),
        "dev": ImageSplit(train_images[dev], train_labels[dev]),
        "test": ImageSplit(test_images[test], test_labels[test]),
    }


def to_inputs(images: torch.Tensor) -> torch.Tensor:
    """Model inputs from ``uint8 (N, H, W)`` gray images: ``float32 (N, 3, H, W)``, normalised, the gray
    channel repeated three times."""
    normalised = (images.float() / 255 - MEAN) / STD
    return normalised.unsqueeze(1).repeat(1, 3, 1, 1)
