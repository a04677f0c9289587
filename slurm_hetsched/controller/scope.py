"""Which jobs and nodes the controller manages: the partitions (and QOS) its config names.

Pure. A job outside the scope is Slurm's alone, even with a `hetsched:` comment: never managed,
refused, held, released or commented; its GPUs count as in use like any unmanaged job's. A node
outside the managed partitions is never planned onto and is left out of the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_hetsched.slurm.records import SlurmJob, SlurmNode


@dataclass(frozen=True, slots=True)
class Scope:
    """The partitions and QOS the controller manages; empty means any.

    Attributes:
        partitions: manage the jobs of these partitions and plan onto their nodes only.
        qos: manage only the jobs of these QOS. Slurm reports a job's QOS only with
            accounting (slurmdbd); without it every job's QOS is empty and matches no name.
    """

    partitions: tuple[str, ...] = ()
    qos: tuple[str, ...] = ()

    @classmethod
    def of(cls, partitions: Iterable[str] = (), qos: Iterable[str] = ()) -> Scope:
        return cls(tuple(partitions), tuple(qos))

    def manages_job(self, job: SlurmJob) -> bool:
        """Whether `job` (a heterogeneous job's leader) is the controller's to manage."""
        # A pending job may name several partitions ("gpu,debug"): one managed partition is
        # enough, since the controller places it on managed nodes only.
        if self.partitions and not set(job.partition.split(",")) & set(self.partitions):
            return False
        return not self.qos or job.qos in self.qos

    def manages_node(self, node: SlurmNode) -> bool:
        """Whether jobs may be planned onto `node` (its state aside: SlurmNode.available)."""
        return not self.partitions or bool(set(node.partitions) & set(self.partitions))
