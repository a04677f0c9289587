"""A Debian chroot on this machine: build it (debootstrap from the host's own Debian mirror),
run commands in it, bind-mount folders into it at the same paths, find its processes by their
root directory, and take every mount under it down again. Knows nothing of Slurm.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_hetsched.errors import DevClusterError

logger = logging.getLogger(__name__)

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
BUILT_MARKER = ".hetsched-built"
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Passed from the caller's environment into apt and debootstrap, so a proxy keeps working.
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY")
_SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def which(program: str) -> str | None:
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(_SBIN)
    return shutil.which(program, path=path)


# --- the host's mirror -------------------------------------------------------------------------
def mirror_from_sources(deb822: Sequence[str], one_line: Sequence[str], codename: str) -> str:
    """The first URI of an enabled `deb` source for `codename`: deb822 (*.sources) texts
    first, then one-line (sources.list) texts. Empty when none matches."""
    for text in deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.lstrip().startswith("#") or ":" not in line:
                    continue
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.strip()
            if (
                fields.get("enabled", "yes").lower() != "no"
                and "deb" in fields.get("types", "").split()
                and codename in fields.get("suites", "").split()
                and fields.get("uris")
            ):
                return fields["uris"].split()[0]
    for text in one_line:
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if not words or words[0] != "deb":
                continue
            rest = words[1:]
            if rest and rest[0].startswith("["):
                while rest and not rest[0].endswith("]"):
                    rest = rest[1:]
                rest = rest[1:]
            if len(rest) >= 2 and rest[1] == codename:
                return rest[0]
    return ""


def host_mirror(
    apt_dir: Path = Path("/etc/apt"), os_release: Path = Path("/etc/os-release")
) -> str:
    """The Debian mirror this host's apt uses for its own release ($HETSCHED_SID_MIRROR wins).

    Raises:
        DevClusterError: none found.
    """
    if os.environ.get("HETSCHED_SID_MIRROR"):
        return os.environ["HETSCHED_SID_MIRROR"]
    codename = ""
    try:
        for line in os_release.read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                codename = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass

    def texts(pattern: str) -> list[str]:
        return [p.read_text(errors="replace") for p in sorted(apt_dir.glob(pattern)) if p.is_file()]

    one_line = texts("sources.list") + texts("sources.list.d/*.list")
    mirror = mirror_from_sources(texts("sources.list.d/*.sources"), one_line, codename)
    if not mirror:
        raise DevClusterError(
            f"no apt source for this host's release ({codename or 'unknown'}) in {apt_dir}: "
            "set HETSCHED_SID_MIRROR to a Debian mirror URL"
        )
    return mirror


# --- running things in it ----------------------------------------------------------------------
def chroot_argv(root: Path, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """argv that runs `argv` in the chroot with a clean environment plus `env`."""
    variables = {"PATH": CHROOT_PATH, "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
    chroot = which("chroot") or "/usr/sbin/chroot"
    return [
        chroot,
        str(root),
        "/usr/bin/env",
        "-i",
        *(f"{k}={v}" for k, v in variables.items()),
        *argv,
    ]


def run_in(
    root: Path,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    check: bool = True,
    timeout_s: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` in the chroot; with `check`, a failure raises DevClusterError with its output."""
    done = subprocess.run(
        chroot_argv(root, argv, env), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and done.returncode != 0:
        output = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise DevClusterError(f"`{' '.join(argv)}` in {root} failed ({done.returncode}):\n{output}")
    return done


def _proxy_env() -> dict[str, str]:
    return {k: os.environ[k] for k in _PROXY_VARIABLES if os.environ.get(k)}


# --- building it -------------------------------------------------------------------------------
def _marker_text(suite: str, packages: Sequence[str]) -> str:
    return f"{suite} {' '.join(packages)}\n"


def is_built(root: Path, suite: str, packages: Sequence[str]) -> bool:
    """Whether `root` holds a chroot of `suite` with exactly these packages installed."""
    try:
        return (root / BUILT_MARKER).read_text() == _marker_text(suite, packages)
    except OSError:
        return False


def build(root: Path, suite: str, packages: Sequence[str], marker_file: str) -> float:
    """debootstrap `suite` into `root` and install `packages`; returns the seconds it took
    (0 when it was built already). A chroot built with other packages gets the missing ones.
    Needs root and network access to the host's mirror.

    Raises:
        DevClusterError: debootstrap or apt failed (with the end of their output).
    """
    if is_built(root, suite, packages):
        return 0.0
    started = time.monotonic()
    if which("debootstrap") is None:
        _run_host(["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"])
    if not (root / "bin" / "sh").exists():
        mirror = host_mirror()
        print(f"debootstrap {suite} into {root} from {mirror} ...", flush=True)
        root.mkdir(parents=True, exist_ok=True)
        _run_host(
            ["debootstrap", "--variant=minbase", f"--keyring={KEYRING}", suite, str(root), mirror]
        )
    _configure(root, marker_file)
    mount_system(root)
    print(f"installing {' '.join(packages)} in the chroot ...", flush=True)
    env = {"DEBIAN_FRONTEND": "noninteractive", **_proxy_env()}
    run_in(root, ["apt-get", "update", "-q"], env)
    run_in(root, ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], env)
    run_in(root, ["apt-get", "clean"], env)
    (root / BUILT_MARKER).write_text(_marker_text(suite, packages))
    return time.monotonic() - started


def _configure(root: Path, marker_file: str) -> None:
    """Settings a fresh chroot needs before apt and daemons work in it."""
    policy = root / "usr" / "sbin" / "policy-rc.d"  # package installs start no daemons
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    # A delayed or frozen mirror has Release files older than the clock.
    (root / "etc" / "apt" / "apt.conf.d" / "99hetsched-no-valid-until").write_text(
        'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n'
    )
    refresh_host_files(root)
    (root / marker_file.lstrip("/")).write_text("hetsched sid dev cluster chroot\n")


def refresh_host_files(root: Path) -> None:
    """Copy the host's resolv.conf and CA bundle (a TLS-intercepting proxy's CA included)
    and name this host in the chroot's /etc/hosts (munged waits for DNS otherwise)."""
    for name in ("etc/resolv.conf", "etc/ssl/certs/ca-certificates.crt"):
        source, target = Path("/") / name, root / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)  # may be a dangling symlink into /run
            shutil.copyfile(source, target)
    hosts = root / "etc" / "hosts"
    host = os.uname().nodename.split(".")[0]
    text = hosts.read_text() if hosts.exists() else "127.0.0.1\tlocalhost\n"
    if not any(host in line.split()[1:] for line in text.splitlines() if line.strip()):
        hosts.write_text(text.rstrip("\n") + f"\n127.0.1.1\t{host}\n")


def _run_host(argv: list[str]) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise DevClusterError(f"`{' '.join(argv)}` failed ({done.returncode}):\n{output}")


# --- mounts ------------------------------------------------------------------------------------
def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(root: Path, mountinfo: str | None = None) -> list[Path]:
    """Mount points at or below `root`, deepest first (the order to unmount them)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    base = os.path.normpath(str(root))
    found = []
    for line in mountinfo.splitlines():
        parts = line.split()
        if len(parts) > 4:
            point = _unescape(parts[4])
            if point == base or point.startswith(base + "/"):
                found.append(Path(point))
    return sorted(set(found), key=lambda p: (-len(p.parts), str(p)))


def _mount(argv: list[str]) -> None:
    done = subprocess.run(["mount", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DevClusterError(f"`mount {' '.join(argv)}` failed: {done.stderr.strip()}")


def _is_mounted(point: Path) -> bool:
    return point in mounts_under(point)


def mount_system(root: Path) -> None:
    """/proc, /sys (slurmd reads /sys/fs/cgroup) and a fresh tmpfs /run in the chroot."""
    if not _is_mounted(root / "proc"):
        _mount(["-t", "proc", "proc", str(root / "proc")])
    if not _is_mounted(root / "sys"):
        _mount(["--rbind", "/sys", str(root / "sys")])
        _mount(["--make-rslave", str(root / "sys")])
    if not _is_mounted(root / "run"):
        _mount(["-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(root / "run")])


def bind_same_path(root: Path, source: Path, *, readonly: bool = False) -> bool:
    """Bind-mount host `source` at the same path inside the chroot; False if already there.

    The mount is made private, so that nothing mounted under it propagates back to the host.
    """
    return bind_at(root, source, source, readonly=readonly)


def bind_at(root: Path, source: Path, inside: Path, *, readonly: bool = False) -> bool:
    """Bind-mount host `source` at path `inside` of the chroot (private, optionally
    read-only); False if something is mounted there already."""
    target = root / str(inside).lstrip("/")
    if _is_mounted(target):
        return False
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    _mount(["--bind", str(source), str(target)])
    _mount(["--make-private", str(target)])
    if readonly:
        _mount(["-o", "remount,bind,ro", str(target)])
    return True


def unmount_all(root: Path) -> list[Path]:
    """Unmount everything at or below `root`, deepest first (lazily if busy); returns them."""
    points = mounts_under(root)
    for point in points:
        done = subprocess.run(["umount", str(point)], capture_output=True, check=False)
        if done.returncode != 0 and _is_mounted(point):
            subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
    return points


# --- its processes -----------------------------------------------------------------------------
def root_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/root")
    except OSError:
        return None


def pids_in(root: Path) -> list[int]:
    """Processes whose root directory is the chroot (and only those)."""
    wanted = os.path.realpath(root)
    return sorted(
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and root_of(int(entry.name)) == wanted
    )
