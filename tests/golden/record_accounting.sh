#!/usr/bin/env bash
# Records what the quota reader (slurm_hetsched/slurm/accounts.py) parses, on a cluster with
# accounting: the dev cluster after `hetsched devcluster up --slurm system --accounting`
# (accounts acct-a, acct-b, acct-c; see README.md, "Accounting").
# Usage: SLURM_CONF=... tests/golden/record_accounting.sh OUTDIR
set -euo pipefail
out=$1
mkdir -p "$out"
# The exact command the reader runs.
sacctmgr --parsable2 --noheader show associations format=Cluster,Account,User,GrpTRES \
    > "$out/sacctmgr_associations.txt"
# Only the lines the reader uses (the rest names this machine's paths and host).
scontrol show config | grep -E '^(Configuration data|ClusterName|Accounting[A-Za-z]*|SLURM_VERSION) ' \
    > "$out/scontrol_config_accounting.txt"
