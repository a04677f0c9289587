"""The sid dev cluster's pure parts: ports, version check, wrapper scripts, the folders shared
with the chroot, the host's mirror, mount listing and the `--slurm sid` command line. The
chroot itself needs root and a network: see docs/devcluster-sid.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hetsched.devcluster import chroot, sidfiles
from slurm_hetsched.devcluster.render import ClusterPaths, render_slurm_conf
from slurm_hetsched.nodelayout import default_devcluster_config
from slurm_hetsched.slurm.version import parse_version

ROOT = Path(__file__).resolve().parents[3]
CLI = (sys.executable, "-m", "slurm_hetsched.cli")


def test_same_layout_on_ports_1000_higher() -> None:
    config = default_devcluster_config()
    sid = sidfiles.sid_config(config)
    assert (sid.slurmctld_port, [sid.slurmd_port(i) for i in range(3)]) == (
        7817,
        [7821, 7822, 7823],
    )
    assert sid.nodes == config.nodes and sid.partition == config.partition
    text = render_slurm_conf(sid, ClusterPaths(Path("/x/sid")), "host")
    assert "SlurmctldPort=7817" in text and "Port=7823" in text
    assert "Gres=gpu:v100:2 Features=v100" in text


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("slurm-wlm 26.05.5\n", (26, 5, 5)),
        ("slurm 24.11.5", (24, 11, 5)),
        ("slurm 25.11", (25, 11, 0)),
        ("slurm-wlm 22.05.8", (22, 5, 8)),
    ],
)
def test_version_is_parsed(text: str, version: tuple[int, int, int]) -> None:
    assert parse_version(text) == version


def test_releases_from_24_11_on_are_accepted() -> None:
    assert sidfiles.version_problem("slurm-wlm 24.11.0") is None
    assert sidfiles.version_problem("slurm-wlm 26.05.5") is None
    assert sidfiles.format_version((26, 5, 5)) == "26.05.5"


@pytest.mark.parametrize("text", ["slurm-wlm 24.05.8", "slurm-wlm 23.11.4", "slurm 22.05.8"])
def test_an_older_release_is_refused_with_its_version(text: str) -> None:
    problem = sidfiles.version_problem(text)
    assert problem and "older than 24.11" in problem
    assert str(parse_version(text)).split(".")[0] in problem


def test_no_version_is_a_problem_too() -> None:
    assert "cannot tell" in str(sidfiles.version_problem("command not found"))


def _wrapper(tmp_path: Path, root: Path) -> Path:
    script = tmp_path / "bin" / "squeue"
    script.parent.mkdir()
    script.write_text(
        sidfiles.wrapper_script("squeue", root, Path("/c/etc/slurm.conf"), "/fake/chroot")
    )
    script.chmod(0o755)
    return script


def test_wrapper_passes_arguments_as_they_are(tmp_path: Path) -> None:
    """Run the script with a fake `chroot` (echoing its argv one per line): arguments with
    spaces, quotes, globs and $ reach the command unchanged, the working directory is kept
    when the chroot has it, and SLURM_CONF is set."""
    root = tmp_path / "root with space"
    (root / tmp_path.relative_to("/")).mkdir(parents=True)
    text = sidfiles.wrapper_script("squeue", root, Path("/c/etc/slurm.conf"), "/bin/sh")
    fake = text.replace(
        "exec /bin/sh",
        'exec /bin/sh -c \'printf "%s\\n" "$SLURM_CONF" "$@"\' -',
    )
    script = tmp_path / "squeue"
    script.write_text(fake)
    args = ["-o", "%i %T", "a b", "'q'", '"$HOME"', "*", "$(id)", ""]
    done = subprocess.run(
        ["/bin/sh", str(script), *args], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    lines = done.stdout.split("\n")[:-1]
    assert lines == [
        "/c/etc/slurm.conf",
        str(root),
        "/usr/bin/env",
        f"--chdir={tmp_path}",
        "/usr/bin/squeue",
        *args,
    ]


def test_wrapper_falls_back_to_root_dir_when_the_chroot_lacks_the_cwd(tmp_path: Path) -> None:
    text = sidfiles.wrapper_script("sinfo", tmp_path / "empty", Path("/c/slurm.conf"), "/bin/sh")
    fake = text.replace("exec /bin/sh", 'exec /bin/sh -c \'printf "%s\\n" "$@"\' -')
    done = subprocess.run(
        ["/bin/sh", "-c", fake, "sinfo"], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert "--chdir=/" in done.stdout.splitlines()


def test_wrapper_runs_the_command_directly_inside_the_chroot() -> None:
    text = sidfiles.wrapper_script("sbatch", Path("/r"), Path("/c/slurm.conf"), "/usr/sbin/chroot")
    assert text.startswith("#!/bin/sh\n")
    assert f'if [ -e {sidfiles.CHROOT_MARKER} ]; then\n    exec /usr/bin/sbatch "$@"' in text
    assert "export SLURM_CONF=/c/slurm.conf" in text
    assert "eval" not in text


def test_another_clusters_config_gets_the_next_command_on_path(tmp_path: Path) -> None:
    """With the wrappers first on PATH, a caller whose SLURM_CONF names another cluster (a
    system-Slurm dev cluster) runs the next squeue on PATH; the sid cluster's own config, in
    any spelling, or none goes to the chroot (here a fake `chroot` echoing its argv)."""
    conf = tmp_path / "sid" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("")
    bin_dir, system = tmp_path / "bin", tmp_path / "system"
    bin_dir.mkdir()
    system.mkdir()
    fake_chroot = tmp_path / "fake-chroot"
    fake_chroot.write_text('#!/bin/sh\necho "chroot $SLURM_CONF $*"\n')
    (system / "squeue").write_text('#!/bin/sh\necho "system $SLURM_CONF $*"\n')
    wrapper = bin_dir / "squeue"
    wrapper.write_text(sidfiles.wrapper_script("squeue", tmp_path / "r", conf, str(fake_chroot)))
    for script in (fake_chroot, system / "squeue", wrapper):
        script.chmod(0o755)

    def run(env: dict[str, str]) -> str:
        path = f"{bin_dir}:{system}"  # the wrapper needs only the shell's builtins
        done = subprocess.run(
            ["squeue", "-h"], capture_output=True, text=True, env={"PATH": path, **env}
        )
        return done.stdout.strip() or done.stderr.strip()

    assert run({"SLURM_CONF": "/other/slurm.conf"}) == "system /other/slurm.conf -h"
    assert run({"SLURM_CONF": str(conf)}).startswith(f"chroot {conf} {tmp_path / 'r'} ")
    assert run({"SLURM_CONF": f"{tmp_path}/sid/../sid/slurm.conf"}).startswith("chroot ")
    assert run({}).startswith(f"chroot {conf} ")
    (system / "squeue").unlink()
    assert "is not the sid cluster's" in run({"SLURM_CONF": "/other/slurm.conf"})


def test_wrapper_quotes_paths_and_refuses_odd_names() -> None:
    text = sidfiles.wrapper_script("squeue", Path("/r o'ot"), Path("/c/s.conf"), "/usr/sbin/chroot")
    assert "'/r o'\"'\"'ot'" in text
    with pytest.raises(ValueError, match="not a Slurm command"):
        sidfiles.wrapper_script("squeue; rm -rf /", Path("/r"), Path("/c"), "chroot")
    with pytest.raises(ValueError, match="absolute"):
        sidfiles.wrapper_script("squeue", Path("r"), Path("/c"), "chroot")


def test_env_puts_the_wrappers_first_on_path() -> None:
    lines = sidfiles.env_lines(
        Path("/p/.devcluster/sid/bin"), Path("/p/.devcluster/sid/etc/s.conf")
    )
    assert lines == [
        'export PATH=/p/.devcluster/sid/bin:"$PATH"',
        "export SLURM_CONF=/p/.devcluster/sid/etc/s.conf",
    ]
    done = subprocess.run(
        ["/bin/sh", "-c", "; ".join(lines) + '; printf "%s\\n" "$PATH" "$SLURM_CONF"'],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert done.stdout.split() == [
        "/p/.devcluster/sid/bin:/usr/bin:/bin",
        "/p/.devcluster/sid/etc/s.conf",
    ]


def test_python_of_its_own_prefix_is_shared_whole() -> None:
    paths = sidfiles.interpreter_paths(
        "/work/p/.venv", "/root/.pyenv/versions/3.11.7", "/root/.pyenv/x/bin/python3.11", "3.11"
    )
    assert paths == [Path("/work/p/.venv"), Path("/root/.pyenv/versions/3.11.7")]


def test_a_system_python_is_shared_as_binary_and_stdlib_only() -> None:
    paths = sidfiles.interpreter_paths("/srv/venv", "/usr", "/usr/bin/python3.11", "3.11")
    assert paths == [Path("/srv/venv"), Path("/usr/bin/python3.11"), Path("/usr/lib/python3.11")]


def test_shared_paths_drop_nested_duplicate_and_system_ones() -> None:
    got = sidfiles.shared_paths(
        [
            Path("/work/p"),
            Path("/work/p/.devcluster/sid"),
            Path("/tmp"),
            Path("/tmp/"),
            Path("/usr"),
            Path("/work/p/.venv"),
            Path("/opt/py"),
        ]
    )
    assert got == [Path("/tmp"), Path("/opt/py"), Path("/work/p")]


@pytest.mark.parametrize(
    ("where", "ok"),
    [("/var/tmp/sid", True), ("/tmp/sid", False), ("/work", False), ("/usr", False), ("x", False)],
)
def test_chroot_may_not_overlap_a_shared_folder(where: str, ok: bool) -> None:
    problem = sidfiles.check_chroot_location(Path(where), [Path("/tmp"), Path("/work/p")])
    assert (problem is None) == ok, problem


def test_mirror_from_deb822_then_one_line_sources() -> None:
    deb822 = [
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n"
        "# a comment\nTypes: deb\nURIs: http://m.example/debian http://n.example\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    ]
    assert chroot.mirror_from_sources(deb822, [], "bookworm") == "http://m.example/debian"
    one_line = [
        "# deb http://commented.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://l.example/debian bookworm main\n"
    ]
    assert chroot.mirror_from_sources([], one_line, "bookworm") == "http://l.example/debian"
    assert chroot.mirror_from_sources(deb822, one_line, "trixie") == ""


def test_host_mirror_reads_the_apt_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HETSCHED_SID_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://m.example/debian\nSuites: bookworm\n"
    )
    release = tmp_path / "os-release"
    release.write_text('NAME="Debian"\nVERSION_CODENAME=bookworm\n')
    assert chroot.host_mirror(tmp_path, release) == "http://m.example/debian"
    monkeypatch.setenv("HETSCHED_SID_MIRROR", "http://override.example/d")
    assert chroot.host_mirror(tmp_path, release) == "http://override.example/d"


def test_mounts_under_the_chroot_deepest_first_with_escapes() -> None:
    info = "\n".join(
        [
            "22 27 0:21 / /proc rw - proc proc rw",
            "90 27 0:21 / /var/tmp/c/proc rw - proc proc rw",
            "91 27 0:22 / /var/tmp/c/sys rw - sysfs sysfs rw",
            "92 91 0:23 / /var/tmp/c/sys/fs/cgroup rw - tmpfs tmpfs rw",
            "93 27 8:1 /work/p /var/tmp/c/work/my\\040p rw - ext4 /dev/vda rw",
            "94 27 8:1 / /var/tmp/cc rw - ext4 /dev/vda rw",
        ]
    )
    assert chroot.mounts_under(Path("/var/tmp/c"), info) == [
        Path("/var/tmp/c/sys/fs/cgroup"),
        Path("/var/tmp/c/work/my p"),
        Path("/var/tmp/c/proc"),
        Path("/var/tmp/c/sys"),
    ]


def test_chroot_argv_has_a_clean_environment() -> None:
    argv = chroot.chroot_argv(Path("/r"), ["slurmd", "-N", "n1"], {"SLURM_CONF": "/c/s.conf"})
    assert argv[1:4] == ["/r", "/usr/bin/env", "-i"]
    assert "SLURM_CONF=/c/s.conf" in argv and argv[-3:] == ["slurmd", "-N", "n1"]


def test_pids_in_a_folder_that_is_no_chroot_are_none(tmp_path: Path) -> None:
    assert chroot.pids_in(tmp_path) == []
    assert chroot.root_of(os.getpid()) == "/" or chroot.root_of(os.getpid()) is not None


def _hetsched(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_hetsched.cli", "devcluster", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_env_command_for_sid(tmp_path: Path) -> None:
    done = _hetsched("--dir", str(tmp_path), "env", "--slurm", "sid")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f'export PATH={tmp_path}/sid/bin:"$PATH"',
        f"export SLURM_CONF={tmp_path}/sid/etc/slurm.conf",
    ]
    plain = _hetsched("--dir", str(tmp_path), "env")
    assert plain.stdout.strip() == f"export SLURM_CONF={tmp_path}/etc/slurm.conf"


def test_every_action_takes_the_slurm_option() -> None:
    for action in ("up", "down", "status", "env", "install"):
        done = _hetsched(action, "--help")
        assert "--slurm {system,sid}" in done.stdout, action
    bad = _hetsched("status", "--slurm", "trixie")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_a_shell_set_up_for_sid_gets_sid_without_the_option(tmp_path: Path) -> None:
    """`hetsched devcluster up` in a shell whose SLURM_CONF is the sid cluster's (a test that
    restarts slurmctld that way) acts on the sid cluster; `--slurm system` still wins."""
    conf = tmp_path / "sid" / "etc" / "slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("")
    env = dict(os.environ, SLURM_CONF=str(tmp_path / "sid" / ".." / "sid" / "etc" / "slurm.conf"))

    def env_of(*extra: str) -> str:
        done = subprocess.run(
            [*CLI, "devcluster", "--dir", str(tmp_path), "env", *extra],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            check=True,
        )
        return done.stdout

    assert f"export SLURM_CONF={conf}" in env_of() and "PATH=" in env_of()
    assert env_of("--slurm", "system").strip() == f"export SLURM_CONF={tmp_path}/etc/slurm.conf"
    env["SLURM_CONF"] = "/elsewhere/slurm.conf"
    assert "PATH=" not in env_of()
