#!/usr/bin/env bash
# The whole suite on both Slurm versions (what `make test` runs, with both dev clusters up):
# the unit tests once, then the tests that need Slurm against the system's Slurm (22.05 on
# Debian 12) and, at the same time, against the newest Slurm of Debian sid in a chroot
# (docs/devcluster-sid.md). The two Slurm runs mostly wait on rounds and jobs, so side by side
# they take little longer than one. The system run prints as it goes; the sid run's output
# follows when both are done. Exits non-zero when any of the three failed.
#
# Usage: tests/both_slurms.sh HETSCHED PYTHON [PYTEST ARGS...]
set -uo pipefail
hetsched=$1
python=$2
shift 2

status=0
"$python" -m pytest -m "not slurm" -p no:cacheprovider "$@" || status=1

# The other users some tests submit as, made now (as root): two runs creating them at the same
# moment would race on /etc/passwd.
"$python" -c 'from tests.users import ALICE, BOB, ensure_user; ensure_user(ALICE); ensure_user(BOB)' \
    || status=1

sid_log=$(mktemp)
trap 'rm -f "$sid_log"' EXIT
# tests/integration/test_devcluster.py tests the dev cluster tool on the system's Slurm with a
# throw-away cluster on fixed ports: the system run covers it, and two copies would collide.
(
    eval "$("$hetsched" devcluster env --slurm sid)" || exit 2
    exec "$python" -m pytest -m slurm -p no:cacheprovider \
        --ignore=tests/integration/test_devcluster.py "$@"
) >"$sid_log" 2>&1 &
sid=$!

echo "=== Slurm tests against the system's Slurm (hetsched devcluster env) ==="
(
    eval "$("$hetsched" devcluster env)" || exit 2
    exec "$python" -m pytest -m slurm -p no:cacheprovider "$@"
) || status=1

wait "$sid" || status=1
echo "=== Slurm tests against sid's Slurm (hetsched devcluster env --slurm sid) ==="
cat "$sid_log"
exit "$status"
