"""Checkpoints by handle: the local folder of a checkpoint that lives on a hub.

    checkpoint_folder("hf://HuggingFaceTB/SmolLM2-135M")        # the Hugging Face Hub, default branch
    checkpoint_folder("hf://HuggingFaceTB/SmolLM2-135M@v1.0")   # a branch, tag or commit
    checkpoint_folder("hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf")  # one GGUF file
    checkpoint_folder("gpt2_base_en")                            # a keras-hub preset name (Kaggle)
    checkpoint_folder("kaggle://keras/gpt2/keras/gpt2_base_en/3")

An `hf://ORG/NAME` handle is `huggingface_hub.snapshot_download` of the
files a checkpoint needs (`HF_FILES`), so the Hugging Face conventions
hold as huggingface_hub keeps them: the shared cache (`HF_HOME`,
`HF_HUB_CACHE`), `HF_HUB_OFFLINE=1` served from that cache, `HF_TOKEN`
for gated and private repositories, `HF_ENDPOINT` for a mirror. A
keras-hub preset name or `kaggle://` handle is fetched by keras-hub's own
preset loader, into Kaggle's cache. Either way the result is a plain
folder, which `from_pretrained` reads like any local one; a local folder
wins over a preset of the same name.

A handle that cannot be fetched (malformed, no such repository or
revision, gated, offline with nothing cached, the hub unreachable) raises
one `CheckpointError` naming the handle.

An `hf://ORG/NAME/FILE.gguf` handle is `huggingface_hub.hf_hub_download`
of that one file (a repository of GGUF files usually holds one per
quantization), under the same conventions; the result is the cached file,
which `from_pretrained` reads as a local GGUF file.
"""

import json
import os
import re
from pathlib import Path

from zoo.checkpoints import registry
from zoo.models.tensor_names import CheckpointError

HF_PREFIX = "hf://"
KAGGLE_PREFIX = "kaggle://"

# What `from_pretrained` reads of a repository, as `snapshot_download` patterns (fnmatch: `*`
# crosses `/`): a transformers folder, then a keras-hub preset. Nothing else downloads (no
# PyTorch, ONNX or GGUF copies of the same weights).
HF_FILES = (
    "config.json",
    "model*.safetensors",  # model.safetensors, or shards model-00001-of-00002.safetensors
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "source.spm",  # Marian's two SentencePiece models
    "target.spm",
    "spiece.model",  # T5's
    "generation_config.json",
    "*.weights.h5",
    "model.weights.json",
    "task.json",
    "preprocessor.json",
    "metadata.json",
    "assets/*",
)
# ORG and NAME as the Hub spells them: letters, digits, `-`, `_`, `.`.
REPO_PART = re.compile(r"[A-Za-z0-9][\w.-]*")
# A folder or file name in a repository; no leading dot, so neither `.` nor `..`.
FILE_PART = re.compile(r"[\w+-][\w.+-]*")
GGUF_SUFFIX = ".gguf"
HANDLE_FORM = (
    "expected hf://ORG/NAME or hf://ORG/NAME/FILE.gguf, either optionally @REVISION, e.g. "
    "hf://HuggingFaceTB/SmolLM2-135M"
)


def is_handle(target):
    """Whether `target` names a checkpoint to fetch rather than a local path:
    an `hf://` or `kaggle://` handle, or a keras-hub preset name with no
    local file or folder of that name."""
    if not isinstance(target, str):
        return False
    if target.startswith((HF_PREFIX, KAGGLE_PREFIX)):
        return True
    return "/" not in target and os.sep not in target and not Path(target).exists() and is_keras_hub_preset(target)


def checkpoint_folder(target, revision=None):
    """The local checkpoint folder (or GGUF file) of a path or a handle, fetched first for a handle.

    Args:
        target: a local folder (returned as it is, unchecked: the drivers
            check it); an `hf://ORG/NAME` handle, optionally pinned as
            `hf://ORG/NAME@REVISION`; an `hf://ORG/NAME/FILE.gguf[@REVISION]`
            handle of one GGUF file in a repository; a keras-hub preset name
            (`gpt2_base_en`) with no local folder of that name; or a
            `kaggle://OWNER/MODEL/keras/VARIANT[/VERSION]` handle.
        revision: for an `hf://` handle, a branch, tag or commit; the
            repository's default branch when None (and no `@REVISION`).

    Returns:
        A `pathlib.Path`: the folder itself, a snapshot in the Hugging Face
        cache (for a GGUF handle, the file in that snapshot), or
        keras-hub's download of the preset.

    Raises:
        CheckpointError: one line naming the handle: a malformed handle
            (before any network access), a revision given twice or for
            another kind of target, a missing repository or revision, a
            gated one without access, offline with nothing cached, the
            hub unreachable, a repository without a `config.json`, or
            without the GGUF file a handle names.
    """
    if isinstance(target, str) and target.startswith(HF_PREFIX):
        repo_id, filename, revision = parse_handle(target, revision)
        if filename is not None:
            return hugging_face_file(target, repo_id, filename, revision)
        return hugging_face_folder(target, repo_id, revision)
    if revision is not None:
        raise CheckpointError(f"{target}: revision={revision!r} applies to hf:// handles only; {HANDLE_FORM}.")
    if is_handle(target):
        return keras_hub_folder(target)
    return Path(target)


def parse_handle(handle, revision=None):
    """(repo_id, filename, revision) of `hf://ORG/NAME[/FILE.gguf][@REVISION]`: filename None for a
    whole checkpoint; a CheckpointError for any other form."""
    body = handle[len(HF_PREFIX) :]
    path, at, pinned = body.partition("@")
    parts = path.split("/")
    repo_parts, file_parts = parts[:2], parts[2:]
    if (len(repo_parts) != 2 or not all(REPO_PART.fullmatch(part) for part in repo_parts)
            or not all(FILE_PART.fullmatch(part) for part in file_parts)
            or (file_parts and not file_parts[-1].lower().endswith(GGUF_SUFFIX)) or (at and not pinned)):
        raise CheckpointError(f"{handle}: not a Hugging Face handle; {HANDLE_FORM}.")
    if pinned and revision is not None and pinned != revision:
        raise CheckpointError(f"{handle}: pins revision {pinned!r} but revision={revision!r}; give one of them.")
    return "/".join(repo_parts), "/".join(file_parts) or None, pinned or revision


def hugging_face_file(handle, repo_id, filename, revision):
    """The cached copy of one file of a repository, downloaded first if need be (see `checkpoint_folder`)."""
    import huggingface_hub

    try:
        return Path(huggingface_hub.hf_hub_download(repo_id, filename, revision=revision))
    except (OSError, ValueError) as error:  # huggingface_hub's errors, whose messages span many lines
        raise CheckpointError(f"{handle}: {download_problem(error, repo_id, revision or 'main', filename)}.") from None


def hugging_face_folder(handle, repo_id, revision):
    """The snapshot folder of an `hf://ORG/NAME` handle in the Hugging Face cache (see `checkpoint_folder`)."""
    import huggingface_hub
    from huggingface_hub import constants

    try:
        folder = Path(huggingface_hub.snapshot_download(repo_id, revision=revision, allow_patterns=list(HF_FILES)))
    except (OSError, ValueError) as error:  # huggingface_hub's errors, whose messages span many lines
        raise CheckpointError(f"{handle}: {download_problem(error, repo_id, revision or 'main')}.") from None
    if not (folder / "config.json").is_file():
        raise CheckpointError(
            f"{handle}: the repository has no config.json at revision {revision or 'main'}; expected a transformers "
            f"checkpoint (config.json, model.safetensors), a keras-hub preset, or for a repository of GGUF files "
            f"one of them named: hf://{repo_id}/FILE.gguf ({constants.HF_HUB_CACHE})."
        )
    return folder


def download_problem(error, repo_id, revision, filename=None):
    """What went wrong, in words, for one of the errors of `snapshot_download`, or of
    `hf_hub_download` of `filename`."""
    from huggingface_hub import constants
    from huggingface_hub.errors import RemoteEntryNotFoundError
    from huggingface_hub.utils import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint, cache = constants.ENDPOINT, constants.HF_HUB_CACHE
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, GatedRepoError) or (isinstance(error, HfHubHTTPError) and status in (401, 403)
                                             and not isinstance(error, RepositoryNotFoundError)):
        return (
            f"{repo_id} on {endpoint} is gated or needs authorization; accept its terms on its page there "
            "and set HF_TOKEN to a token of that account (or log in with `hf auth login`)"
        )
    if isinstance(error, RepositoryNotFoundError):
        return (
            f"no repository {repo_id} on {endpoint}; expected an existing model repository "
            "(a private one needs HF_TOKEN)"
        )
    if isinstance(error, RevisionNotFoundError):
        return (
            f"no revision {revision!r} in {repo_id} on {endpoint}; expected a branch, tag or commit of the repository"
        )
    if isinstance(error, RemoteEntryNotFoundError):
        return (
            f"no file {filename} in {repo_id} at revision {revision!r} on {endpoint}; expected the path of one of the "
            "repository's GGUF files, as its page on the Hub lists them"
        )
    if isinstance(error, LocalEntryNotFoundError):
        copy = f"a copy of {filename} at" if filename else "a complete copy of"
        if constants.HF_HUB_OFFLINE:
            return (
                f"HF_HUB_OFFLINE is set and the Hugging Face cache ({cache}) has no {copy} revision "
                f"{revision!r}; download it once with HF_HUB_OFFLINE unset"
            )
        return (
            f"cannot reach the Hugging Face Hub at {endpoint} (HF_ENDPOINT) and the cache ({cache}) has no {copy} "
            f"revision {revision!r}; check the connection, or HF_ENDPOINT"
        )
    first = (str(error).strip().splitlines() or [""])[0]
    return f"the download from {endpoint} (HF_ENDPOINT) failed: {type(error).__name__}: {first}"


def is_keras_hub_preset(name):
    """Whether keras-hub lists `name` among its presets."""
    import keras_hub

    return name in keras_hub.models.Backbone.presets


def keras_hub_folder(handle):
    """keras-hub's local copy of a preset name or `kaggle://` handle, with the
    files the keras-hub driver reads (see `checkpoint_folder`)."""
    # keras-hub's file fetching: the handle forms it accepts, Kaggle's client and cache; it has no
    # public name for it.
    from keras_hub.src.utils.preset_utils import check_file_exists, get_file

    try:
        config = Path(get_file(handle, "config.json"))
        if check_file_exists(handle, "model.weights.json"):  # sharded weights
            index = json.loads(Path(get_file(handle, "model.weights.json")).read_text(encoding="utf-8"))
            for shard in dict.fromkeys(index.get("weight_map", {}).values()):
                get_file(handle, shard)
        else:
            get_file(handle, "model.weights.h5")
        if check_file_exists(handle, "task.json"):
            check_file_exists(handle, "task.weights.h5")
        for optional in ("preprocessor.json", "metadata.json"):
            check_file_exists(handle, optional)
        if check_file_exists(handle, "tokenizer.json"):
            tokenizer = json.loads(Path(get_file(handle, "tokenizer.json")).read_text(encoding="utf-8"))
            for asset in registry.KERAS_HUB_TOKENIZERS.get(tokenizer.get("registered_name"), ()):
                get_file(handle, f"assets/tokenizer/{asset}")
    except Exception as error:  # Kaggle's client and keras-hub raise many kinds, each with its own words
        first = (str(error).strip().splitlines() or [""])[0]
        raise CheckpointError(
            f"{handle}: keras-hub could not fetch the preset: {type(error).__name__}: {first}"
        ) from None
    return config.parent
