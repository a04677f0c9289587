"""What a save or load function is handed: `CheckpointWriter` puts files into the checkpoint
being written, `CheckpointReader` gives verified access to a committed one.

Every file a writer puts in is digested (size and CRC-32) for the checkpoint's manifest; a
reader hands out a file only after checking it against the manifest, and loads objects with
serialize.py's rules (no code from the file). The checkpoint folder itself (temporary folder,
marker, commit, pruning) is checkpoint.py's `CheckpointStore`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_hetsched.errors import HetschedError
from slurm_hetsched.statefolder import MARKER
from slurm_hetsched.wrapper.checked_files import FileDigest, digest_file, read_verified
from slurm_hetsched.wrapper.serialize import load_object, save_object
from slurm_hetsched.wrapper.state_errors import CorruptStateError, UnsafeStateError


class CheckpointError(HetschedError):
    """A checkpoint could not be written."""


class CheckpointCorruptError(CorruptStateError):
    """A checkpoint is torn (no marker) or corrupt (bad marker, size or checksum)."""


class CheckpointUnsafeError(CheckpointCorruptError, UnsafeStateError):
    """A checkpoint file needs a type that loading does not allow (see register_safe_type)."""


class CheckpointWriter:
    """Handed to a save function: puts files into the checkpoint being written.

    Attributes:
        folder: the temporary folder (it becomes `ckpt-<step>` on commit).
        step: the step the checkpoint is for.
        rank_states: per-rank values gathered before the save (see JobSession); [] if none.
    """

    def __init__(self, folder: Path, step: int, rank_states: list[Any]) -> None:
        self.folder = folder
        self.step = step
        self.rank_states = rank_states
        self._digests: dict[str, FileDigest | None] = {}

    def save_object(self, name: str, obj: Any) -> None:
        """Write `obj` (tensors and arrays at full disk speed) as file `name`."""
        self._digests[name] = save_object(obj, self._path(name))

    def path(self, name: str) -> Path:
        """A path to write file `name` by other means; its checksum is read back at commit."""
        path = self._path(name)
        self._digests[name] = None
        return path

    def _path(self, name: str) -> Path:
        if "/" in name or name.startswith(".") or name == MARKER or name in self._digests:
            raise ValueError(f"bad or repeated checkpoint file name {name!r}")
        return self.folder / name

    def finish(self) -> dict[str, FileDigest]:
        """Digest and fsync the files written by other means (save_object fsyncs its own)."""
        digests: dict[str, FileDigest] = {}
        for name, digest in self._digests.items():
            if digest is not None:
                digests[name] = digest
                continue
            path = self.folder / name
            if not path.is_file():
                raise CheckpointError(f"save function announced {name!r} but did not write it")
            if path.is_symlink():  # loading never follows links
                raise CheckpointError(f"checkpoint file {name!r} is a symlink, not a file")
            digests[name] = digest_file(path)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return digests


@dataclass(frozen=True, slots=True)
class CheckpointReader:
    """Handed to a load function: verified access to one committed checkpoint.

    Attributes:
        folder: the `ckpt-<step>` folder.
        step: completed steps when it was written.
        manifest: the parsed `COMMITTED` marker (files, job_id, restart_count, meta, ...).
    """

    folder: Path
    step: int
    manifest: Mapping[str, Any]
    _verified: set[str] = field(default_factory=set)

    @property
    def meta(self) -> Mapping[str, Any]:
        meta = self.manifest.get("meta")
        return meta if isinstance(meta, Mapping) else {}

    def load_object(self, name: str) -> Any:
        """The object saved as `name`, after checking its size and checksum.

        Raises:
            CheckpointCorruptError: missing, damaged, or not loadable.
        """
        data = self._read(name)
        try:
            return load_object(data, str(self.folder / name))
        except UnsafeStateError as exc:
            raise CheckpointUnsafeError(str(exc), exc.type_name) from exc
        except CorruptStateError as exc:
            raise CheckpointCorruptError(str(exc)) from exc

    def path(self, name: str) -> Path:
        """The path of file `name`, after checking its size and checksum."""
        if name not in self._verified:
            self._read(name)
            self._verified.add(name)
        return self.folder / name

    def _read(self, name: str) -> bytearray:
        files = self.manifest.get("files", {})
        entry = files.get(name) if isinstance(files, Mapping) else None
        if not isinstance(entry, Mapping):
            raise CheckpointCorruptError(f"{self.folder} has no file {name!r} in its manifest")
        try:
            expected = FileDigest(int(entry["size"]), int(entry["crc32"]))
            return read_verified(self.folder / name, expected)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointCorruptError(f"{self.folder}: bad manifest entry {name!r}") from exc
        except CorruptStateError as exc:
            raise CheckpointCorruptError(str(exc)) from exc
