#!/usr/bin/env bash
# Gating a project's CI on memory: an absolute budget, and a diff against the previous release.
# docs/CI.md explains it; tests/cli runs exactly this script.
#   usage: ci-example.sh ADPROF PROGRAM
#   ADPROF_CI_EXAMPLE_REGRESS=1 simulates a change that switches in-place accumulation off.
set -euo pipefail
adprof=$(realpath "$1")
program=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# 1. The previous release's report (in a real project: downloaded from that release's CI
#    artifacts, e.g. `adprof report --json` output kept as release-report.json).
"$adprof" run --no-report -o release.adtrace -- "$program" --quiet --size 262144
"$adprof" report --json release.adtrace >release-report.json

# 2. The change under test.
flags=()
if [[ "${ADPROF_CI_EXAMPLE_REGRESS:-0}" == 1 ]]; then flags+=(--no-inplace-accumulation); fi
"$adprof" run --no-report -o change.adtrace -- "$program" --quiet --size 262144 "${flags[@]}"

# 3. Absolute budgets: exit 1 when one is exceeded.
"$adprof" check change.adtrace --max-peak 16MiB --max-role duplicate=0 --max-role accumulation=0

# 4. No regression against the release: exit 1 when a gate fails. The Markdown goes into a
#    pull-request comment.
"$adprof" diff release-report.json change.adtrace --markdown \
  --fail-if 'peak > +5%' --fail-if 'allocations > +10%' --fail-if 'role.duplicate > 0' \
  >memory-diff.md
cat memory-diff.md
echo "memory gates pass"
