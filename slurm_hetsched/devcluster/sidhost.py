"""What of the host a job in the sid chroot sees besides the shared folders: the host's users
and groups, and the host's system Python as /usr/bin/python3 (docs/devcluster-sid.md).

Users: the chroot's nsswitch.conf asks `files` (the chroot's own users: root, munge, slurm)
and then `extrausers` (libnss-extrausers), which reads /var/lib/extrausers/{passwd,group,
shadow} (shadow: so that `su` in the chroot, which slurmd runs for --get-user-env, treats a
host user as `su` on the host does).
The host's /etc is bind-mounted read-only on that folder, so the chroot's Slurm resolves
every host user, also one added after `up` (useradd replaces /etc/passwd by a rename: a
mount of the folder sees the new file, a mount of the single file would not).

Python: tests run other users' jobs with this venv's interpreter or, when those users cannot
run it (under /root, mode 0700), with /usr/bin/python3 and the checkout on PYTHONPATH. The
chroot has no Python of its own, so its /usr/bin/python3 is made to be the host's: the host's
binary (`realpath /usr/bin/python3`, e.g. /usr/bin/python3.11) and its standard library are
mounted at their paths and /usr/bin/python3 links to the binary.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import slurm_hetsched.devcluster.chroot as chroot

HOST_ETC = Path("/var/lib/extrausers")  # the host's /etc, read-only, inside the chroot
NSS_DATABASES = ("passwd", "group", "shadow")
SYSTEM_PYTHON = Path("/usr/bin/python3")
WRAPPER_IMPORT = "import slurm_hetsched.wrapper"


# --- pure --------------------------------------------------------------------------------------
def nsswitch_text(text: str) -> str:
    """`text` (an nsswitch.conf) with `extrausers` after the sources of NSS_DATABASES."""
    lines, seen = [], set()
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        name = name.strip()
        if colon and name in NSS_DATABASES:
            seen.add(name)
            sources = rest.split()
            if "extrausers" not in sources:
                line = f"{name + ':':<16}{' '.join([*sources, 'extrausers'])}"
        lines.append(line)
    lines += [f"{name + ':':<16}files extrausers" for name in NSS_DATABASES if name not in seen]
    return "\n".join(lines) + "\n"


def _entries(text: str) -> list[tuple[str, str]]:
    """(name, numeric id) of each line of a passwd or group file."""
    fields = (line.split(":") for line in text.splitlines() if line and line[0] != "#")
    return [(f[0], f[2]) for f in fields if len(f) > 2]


def shadowed(host: str, chroot_own: str) -> list[str]:
    """Host entries (passwd or group texts) the chroot answers with another name: their id
    belongs to a chroot entry of another name, and the chroot's own files are asked first."""
    names = {name for name, _ in _entries(chroot_own)}
    owner: dict[str, str] = {}
    for name, ident in _entries(chroot_own):
        owner.setdefault(ident, name)
    return [
        f"{name} ({ident} is {owner[ident]} in the chroot)"
        for name, ident in _entries(host)
        if name not in names and ident in owner
    ]


def system_python(binary: str) -> tuple[Path, Path] | None:
    """(binary, standard library folder) of a Debian system Python, from the real path of
    /usr/bin/python3 ("/usr/bin/python3.11"); None for anything else."""
    found = re.fullmatch(r"/usr/bin/python(3\.\d+)", binary)
    if found is None:
        return None
    return Path(binary), Path(f"/usr/lib/python{found.group(1)}")


# --- in the chroot -----------------------------------------------------------------------------
def share_users(root: Path) -> str:
    """nsswitch.conf with extrausers, and the host's /etc read-only on /var/lib/extrausers;
    says which host users or groups the chroot's own entries hide (same id, other name)."""
    conf = root / "etc" / "nsswitch.conf"
    text = conf.read_text() if conf.exists() else ""
    if nsswitch_text(text) != text:
        conf.write_text(nsswitch_text(text))
    chroot.bind_at(root, Path("/etc"), HOST_ETC, readonly=True)
    problems = []
    for database in ("passwd", "group"):
        host, own = Path("/etc") / database, root / "etc" / database
        if host.is_file() and own.is_file():
            problems += [
                f"{database} {entry}" for entry in shadowed(host.read_text(), own.read_text())
            ]
    line = f"host users and groups resolve in the chroot (its /etc on {HOST_ETC})"
    if problems:
        line += "; shadowed by the chroot's own: " + ", ".join(problems)
    return line


def share_system_python(root: Path) -> str | None:
    """Make the chroot's /usr/bin/python3 the host's system Python; what was done, or None
    when the host has no Debian system Python."""
    found = system_python(os.path.realpath(SYSTEM_PYTHON))
    if found is None or not all(path.exists() for path in found):
        return None
    for path in found:
        chroot.bind_same_path(root, path, readonly=True)
    link = root / str(SYSTEM_PYTHON).lstrip("/")
    binary = found[0]
    if link.is_symlink() and os.readlink(link) == binary.name:
        pass
    elif link.exists() or link.is_symlink():
        return (
            f"WARNING: the chroot has a {SYSTEM_PYTHON} of its own; jobs that run it get "
            f"the chroot's Python, not the host's {binary}"
        )
    else:
        link.symlink_to(binary.name)
    return f"{SYSTEM_PYTHON} in the chroot is the host's {binary}"


def check_python(root: Path, python: str, env: dict[str, str] | None = None) -> str:
    """Whether `python` (with `env`) runs in the chroot and imports the wrapper."""
    code = f"import ctypes, sqlite3, ssl; {WRAPPER_IMPORT}"
    done = chroot.run_in(root, [python, "-c", code], env, check=False, timeout_s=60)
    if done.returncode == 0:
        return f"jobs in the chroot can run {python} (the host's, same path)"
    last = (done.stderr.strip().splitlines() or ["?"])[-1]
    return f"WARNING: {python} does not work in the chroot: {last}"
