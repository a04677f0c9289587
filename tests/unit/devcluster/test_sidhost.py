"""The pure parts of what the sid chroot sees of the host: nsswitch.conf with extrausers, the
host users its own entries hide, and the host's system Python (docs/devcluster-sid.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetsched.devcluster import sidfiles, sidhost

DEBIAN_NSSWITCH = """# /etc/nsswitch.conf

passwd:         files
group:          files
shadow:         files
gshadow:        files

hosts:          files dns
"""


def test_extrausers_is_asked_after_the_chroots_own_files() -> None:
    text = sidhost.nsswitch_text(DEBIAN_NSSWITCH)
    lines = text.splitlines()
    assert "passwd:         files extrausers" in lines
    assert "group:          files extrausers" in lines
    assert "shadow:         files extrausers" in lines
    assert "gshadow:        files" in lines and "hosts:          files dns" in lines
    assert lines[0] == "# /etc/nsswitch.conf"
    assert sidhost.nsswitch_text(text) == text  # idempotent: `up` runs it every time


def test_missing_databases_are_added() -> None:
    text = sidhost.nsswitch_text("hosts: files\npasswd: compat systemd\n")
    assert text.splitlines() == [
        "hosts: files",
        "passwd:         compat systemd extrausers",
        "group:          files extrausers",
        "shadow:         files extrausers",
    ]


def test_host_entries_whose_id_the_chroot_gives_another_name_are_reported() -> None:
    host = "root:x:0:0::/root:/bin/bash\nmunge:x:102:105::/:/bin/false\n"
    host += "postgres:x:101:104::/:/bin/bash\nhetsched-alice:x:999:995::/h:/usr/sbin/nologin\n"
    chroot = "root:x:0:0::/root:/bin/bash\nmunge:x:101:101::/:/bin/false\n"
    # munge is the chroot's own (another id is fine); alice's 999 is free; postgres' 101 is not
    assert sidhost.shadowed(host, chroot) == ["postgres (101 is munge in the chroot)"]
    assert sidhost.shadowed("# comment\n\n", chroot) == []


@pytest.mark.parametrize(
    ("binary", "expected"),
    [
        ("/usr/bin/python3.11", (Path("/usr/bin/python3.11"), Path("/usr/lib/python3.11"))),
        ("/usr/bin/python3.13", (Path("/usr/bin/python3.13"), Path("/usr/lib/python3.13"))),
        ("/usr/local/bin/python3.12", None),
        ("/root/.pyenv/versions/3.11.7/bin/python3.11", None),
        ("/usr/bin/python3", None),
    ],
)
def test_only_a_debian_system_python_is_shared_as_usr_bin_python3(
    binary: str, expected: tuple[Path, Path] | None
) -> None:
    assert sidhost.system_python(binary) == expected


def test_the_chroot_gets_the_nss_module_and_what_debians_python_links() -> None:
    assert {"libnss-extrausers", "libexpat1"} <= set(sidfiles.PACKAGES)
