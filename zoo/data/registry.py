"""Data sets by name: fetched from their public homes, checked by sha256, cached.

    text = zoo.data.read_text("tinyshakespeare")                   # the readers take a name
    folder = zoo.data.fetch_dataset("multi30k")                     # the folder of its files
    zoo.data.list_datasets()                                        # the names

A name resolves, in this order, to:

1. `ZOO_DATA=DIR`, a local copy laid out as `DIR/<name>/<file>` (an
   offline mirror; its files are checked against the sha256 too);
2. the cache, `~/.cache/zoo/datasets/<name>/` (`$ZOO_HOME/datasets/<name>/`
   where `ZOO_HOME` is set);
3. a download from the public URL (or from `$ZOO_DATA_MIRROR/<name>/<file>`
   where `ZOO_DATA_MIRROR` is set), with a progress bar, into a temporary
   folder beside the cache; the file is moved into the cache only once its
   sha256 matches, so an interrupted or corrupted download leaves no file
   that looks complete.

A recipe's `--data PATH` (a local file or folder) comes before all of these:
it is not a name. A refusal is one `DataError` line: offline with nothing
cached (the URL, `--data` and `ZOO_DATA` named), a checksum mismatch (both
hashes), an unknown name (the known ones).
"""

import dataclasses
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from zoo.errors import DataError
from zoo.files import zoo_home


@dataclasses.dataclass(frozen=True)
class DataFile:
    """One file of a data set: its name in the data set's folder, its public
    URL (pinned to a commit), sha256 and size in bytes."""

    name: str
    url: str
    sha256: str
    size: int


@dataclasses.dataclass(frozen=True)
class DataSet:
    """A registered data set: what it is, its files, licence and provenance.

    `path_in(folder)` is what the readers take: the file itself for a data
    set of one file (Tiny Shakespeare's `input.txt`), else the folder.
    """

    name: str
    description: str
    files: tuple
    licence: str
    provenance: str

    @property
    def size(self):
        return sum(file.size for file in self.files)

    def path_in(self, folder):
        return folder / self.files[0].name if len(self.files) == 1 else folder


_CHAR_RNN = "https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare"
_MULTI30K = (
    "https://raw.githubusercontent.com/jadore801120/attention-is-all-you-need-pytorch/"
    "08b4ac2b9a9dc99f0d186ad17ba622be8e1f6b07/data/multi30k"
)
_SST2 = "https://raw.githubusercontent.com/awake020/pytorch_Bert_sst2/ce2ab1719d32182e6233b24b2de246bd32814fde/SST-2"

DATASETS = {
    dataset.name: dataset
    for dataset in (
        DataSet(
            name="tinyshakespeare",
            description="Tiny Shakespeare: 1,115,394 characters of Shakespeare's plays (char-rnn, nanoGPT)",
            files=(
                DataFile("input.txt", f"{_CHAR_RNN}/input.txt",
                         "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", 1_115_394),
            ),
            licence="Shakespeare's plays: public domain; the char-rnn repository that compiled them: MIT",
            provenance="Andrej Karpathy's char-rnn, data/tinyshakespeare/input.txt; also tfds:tiny_shakespeare",
        ),
        DataSet(
            name="multi30k",
            description="Multi30k German-English (WMT16 multimodal task 1): 29,000 train and 1,014 val pairs",
            files=tuple(
                DataFile(name, f"{_MULTI30K}/{name}", sha256, size)
                for name, sha256, size in (
                    ("train.de", "695df46f6fd14567e69970408a2c129a50e778a910ecb1585a92eb25b2c7accc", 2_110_399),
                    ("train.en", "4b4d37e774976ef44fecca1738cdeb3b3ba384851a59a755b9c5e6aa7d87b13c", 1_801_239),
                    ("val.de", "fd0fc009db2446cfc12d96a382aff0d3122cb47577b352d0f7e0bb3a38e2e552", 75_920),
                    ("val.en", "40cd20974079d9afb0e3d27c659a8e059cc2fcf850b4bc23ede13fc36dd8a865", 63_298),
                )
            ),
            licence="Multi30k (Elliott et al. 2016): for research, under the terms of the Flickr30k captions it extends",
            provenance="Multi30k task 1 (github.com/multi30k/dataset), untokenized and cased, as copied in "
            "jadore801120/attention-is-all-you-need-pytorch",
        ),
        DataSet(
            name="sst2",
            description="SST-2 binary sentiment (GLUE): 67,349 train phrases, 872 dev sentences, label<TAB>sentence",
            files=tuple(
                DataFile(name, f"{_SST2}/{name}", sha256, size)
                for name, sha256, size in (
                    ("train.tsv", "e981ceb4fe6c9acd1c79851d0d091b9e78103f1f2a399ca83dda27915d41c56c", 3_806_081),
                    ("dev.tsv", "84207e6be5873fb18db798cc6faec86871f5a426554650ff64a1c34e87665f6f", 94_414),
                )
            ),
            licence="Stanford Sentiment Treebank (Socher et al. 2013), distributed with GLUE for research",
            provenance="GLUE's SST-2 (train.tsv, dev.tsv), as copied in awake020/pytorch_Bert_sst2; also tfds:glue/sst2",
        ),
    )
}


def list_datasets():
    """The registered data set names, e.g. `["tinyshakespeare", "multi30k", "sst2"]`."""
    return list(DATASETS)


def dataset_info(name):
    """The `DataSet` record of `name`; a one-line `DataError` naming the
    known names for any other."""
    if name not in DATASETS:
        raise DataError(f"{name!r}: not a registered data set; expected one of {', '.join(DATASETS)}")
    return DATASETS[name]


def is_dataset_name(source):
    """Whether `source` is a registered name (a str; a `Path` is always a path)."""
    return isinstance(source, str) and source in DATASETS


def cache_folder(name):
    """Where the data set `name` is cached: `zoo_home() / "datasets" / name`."""
    return zoo_home() / "datasets" / name


def local_copy(name):
    """`$ZOO_DATA/<name>` where `ZOO_DATA` is set and holds every file of
    `name` (unchecked), else None."""
    local = os.environ.get("ZOO_DATA")
    if local and all((Path(local) / name / file.name).is_file() for file in dataset_info(name).files):
        return Path(local) / name
    return None


def is_cached(name):
    """Whether every file of `name` is in the cache with its sha256."""
    dataset = dataset_info(name)
    folder = cache_folder(name)
    return all(_has_file(folder / file.name, file) for file in dataset.files)


def fetch_dataset(name):
    """The local folder of a registered data set, downloaded first where
    needed (Keras' progress bar shows each download).

    Args:
        name: a registered name (`list_datasets()`).

    Returns:
        A `pathlib.Path`: `$ZOO_DATA/<name>` where that holds the files,
        else the cache folder, with every file checked against its sha256.

    Raises:
        DataError: one line: an unknown name; a `ZOO_DATA` copy or a
            download whose sha256 differs (both hashes given; nothing is
            cached); a download that fails (the URL, `--data` and
            `ZOO_DATA` named).
    """
    dataset = dataset_info(name)
    folder = local_copy(name)
    if folder is not None:
        for file in dataset.files:
            _check(folder / file.name, file, where="ZOO_DATA")
        return folder
    folder = cache_folder(name)
    for file in dataset.files:
        if not _has_file(folder / file.name, file):
            _download(dataset, file, folder)
    return folder


def dataset_path(source):
    """What a reader opens for `source`: a registered name's file (a data
    set of one file) or folder, fetched where needed; any other source as a
    `Path`."""
    if is_dataset_name(source):
        dataset = DATASETS[source]
        return dataset.path_in(fetch_dataset(source))
    return Path(source)


def file_url(dataset, file):
    """Where `file` of `dataset` is downloaded from: `$ZOO_DATA_MIRROR/<name>/<file>`
    where `ZOO_DATA_MIRROR` is set, else its public URL."""
    mirror = os.environ.get("ZOO_DATA_MIRROR")
    return f"{mirror.rstrip('/')}/{dataset.name}/{file.name}" if mirror else file.url


def sha256_of(path):
    """The sha256 of a file, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _has_file(path, file):
    # The size first: a partial or foreign file is told apart without hashing it.
    return path.is_file() and path.stat().st_size == file.size and sha256_of(path) == file.sha256


def _check(path, file, where):
    actual = sha256_of(path)
    if actual != file.sha256:
        raise DataError(
            f"{path} ({where}): sha256 {actual}, expected {file.sha256}; the copy is corrupted or another version"
        )


def _download(dataset, file, folder):
    """Downloads `file` into a temporary folder beside `folder` with Keras'
    `get_file` (progress bar, sha256 check), then moves it in place."""
    from keras.utils import get_file

    url = file_url(dataset, file)
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{file.name}.", suffix=".partial", dir=folder))
    try:
        try:
            path = get_file(
                fname=file.name, origin=url, cache_dir=str(staging), cache_subdir="", hash_algorithm="sha256"
            )
        except Exception as error:  # Keras wraps every network failure in a bare Exception
            reason = _failure(error, url)
            raise DataError(
                f"{dataset.name}: could not download {url} ({reason}); expected network access, or a local copy: "
                f"--data PATH, or ZOO_DATA=DIR holding {dataset.name}/{file.name}"
            ) from None
        actual = sha256_of(path)
        if actual != file.sha256:
            raise DataError(
                f"{url}: sha256 {actual}, expected {file.sha256}; the download was refused and nothing was cached"
            )
        os.replace(path, folder / file.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _failure(error, url):
    """The reason in Keras' "URL fetch failure on URL: CODE -- REASON", or the error's first line."""
    text = (str(error).splitlines() or [type(error).__name__])[0]
    code, _, reason = text.split(f"{url}: ", 1)[-1].partition(" -- ")
    if not reason:
        return text or type(error).__name__
    return reason if code == "None" else f"HTTP {code} {reason}"
