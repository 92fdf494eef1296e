"""What every CLI module shares: the artefact root a command works on.

Its own module so that flows/cli.py and the modules registering commands on it
(cli_product.py, cli_ops.py) import it without importing each other.
"""

from __future__ import annotations

from pathlib import Path

from ctxsim.flows.cli_errors import fail


def root_of(config: Path | None, root: str | None) -> str:
    """``--root``, else the config's ``run.root`` (configs/quickstart.yaml's when no config is
    given and it exists here); a bad config is one line."""
    from ctxsim.flows.config import ConfigError, load_config

    if root:
        return root
    path = config or (
        Path("configs/quickstart.yaml") if Path("configs/quickstart.yaml").exists() else None
    )
    try:
        return load_config(path, stages=[]).run.root
    except ConfigError as e:
        fail(e, 2)
        raise


def existing_store(config: Path | None, root: str | None):  # noqa: ANN201 - lazy import
    """The store at the configured root, for read-only commands: creates nothing (a command
    run from another folder, or with a mistyped --root, must leave no folder behind), None if
    absent."""
    from ctxsim.store.artefacts import ArtefactStore

    path = Path(root_of(config, root)).expanduser()
    return ArtefactStore(path, create=False) if path.is_dir() else None


def require_store(config: Path | None, root: str | None):  # noqa: ANN201 - lazy import
    """:func:`existing_store`, or one line naming the root that is not there (exit 2)."""
    store = existing_store(config, root)
    if store is None:
        fail(f"no artefact root {Path(root_of(config, root)).expanduser()} (check --root)", 2)
    return store
