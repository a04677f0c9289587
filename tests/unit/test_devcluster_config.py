"""Node layout parsing and the rendered Slurm configuration of the dev cluster."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from slurm_hetsched.devcluster.render import (
    ClusterPaths,
    render_gres_conf,
    render_plugstack_conf,
    render_slurm_conf,
)
from slurm_hetsched.errors import ConfigError
from slurm_hetsched.nodelayout import (
    default_devcluster_config,
    load_devcluster_config,
    parse_devcluster_config,
)

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_layout_is_the_built_in_default() -> None:
    shipped = load_devcluster_config(ROOT / "etc" / "devcluster.toml")
    assert shipped == default_devcluster_config()
    assert [(n.name, dict(n.gpus)) for n in shipped.nodes] == [
        ("n1", {"v100": 2}),
        ("n2", {"p100": 2}),
        ("n3", {"k80": 4}),
    ]
    assert shipped.gpu_types == ("v100", "p100", "k80")


def test_a_node_may_have_several_gpu_types_and_its_own_cpus() -> None:
    config = parse_devcluster_config(tomllib.loads("""
        [cluster]
        slurmctld_port = 7000
        [[nodes]]
        name = "big"
        gpus = { a100 = 2, t4 = 4 }
        cpus = 32
    """))
    (node,) = config.nodes
    assert dict(node.gpus) == {"a100": 2, "t4": 4}
    assert (node.cpus, node.memory_mb, node.total_gpus) == (32, 4000, 6)
    assert config.slurmctld_port == 7000


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[[nodes]]\nname='n1'\ngpus={v100=2}\ncolour='red'", "unknown key.*colour.*valid keys"),
        ("[cluster]\nport=1\n[[nodes]]\nname='n1'\ngpus={v100=2}", "unknown key.*port"),
        ("[[nodes]]\nname='n1'\ngpus={V100=2}", "GPU type 'V100' must be lower case"),
        ("[[nodes]]\nname='n1'\ngpus={v100=0}", "gpus.v100.*from 1"),
        ("[[nodes]]\nname='n1'\ngpus={}", "gpus must be a table"),
        (
            "[[nodes]]\nname='n1'\ngpus={v100=1}\n[[nodes]]\nname='n1'\ngpus={k80=1}",
            "used twice: n1",
        ),
        ("[cluster]\nname='x'", "at least one \\[\\[nodes\\]\\]"),
        ("[cluster]\nslurmctld_port=70000\n[[nodes]]\nname='n1'\ngpus={v100=1}", "1 to 65535"),
        ("[[nodes]]\nname='n 1'\ngpus={v100=1}", "node name"),
    ],
)
def test_bad_layouts_are_rejected_with_the_offending_key(toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_devcluster_config(tomllib.loads(toml), "layout.toml")


def test_unreadable_or_invalid_files_give_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_devcluster_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[nodes]\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_devcluster_config(bad)


def test_slurm_conf_gives_each_node_its_port_gres_and_features() -> None:
    config = default_devcluster_config()
    paths = ClusterPaths(Path("/srv/dev"))
    text = render_slurm_conf(config, paths, "host1")
    nodes = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert nodes[0].startswith("NodeName=n1 NodeHostname=n1 NodeAddr=127.0.0.1 Port=6821 ")
    assert "Gres=gpu:v100:2 Features=v100" in nodes[0]
    assert "Port=6823" in nodes[2] and "Gres=gpu:k80:4 Features=k80" in nodes[2]
    assert "SlurmctldHost=host1(127.0.0.1)" in text
    assert "AuthInfo=cred_expire=10" in text
    assert "JobCompType=jobcomp/filetxt" in text
    assert "PartitionName=gpu Nodes=n1,n2,n3 Default=YES" in text
    assert f"StateSaveLocation={paths.state}" in text


def test_gres_conf_numbers_fake_devices_per_node_and_type() -> None:
    config = parse_devcluster_config(
        tomllib.loads("[[nodes]]\nname='a'\ngpus={a100=2, t4=1}\n[[nodes]]\nname='b'\ngpus={k80=4}")
    )
    text = render_gres_conf(config, ClusterPaths(Path("/d")))
    assert text.splitlines()[1:] == [
        "AutoDetect=off",
        "NodeName=a Name=gpu Type=a100 File=/d/fakedev/nvidia[0-1]",
        "NodeName=a Name=gpu Type=t4 File=/d/fakedev/nvidia2",
        "NodeName=b Name=gpu Type=k80 File=/d/fakedev/nvidia[0-3]",
    ]


def test_spank_plugins_are_registered_optional() -> None:
    text = render_plugstack_conf([Path("/x/hetsched_spank.so")])
    assert text.splitlines()[-1] == "optional /x/hetsched_spank.so"
