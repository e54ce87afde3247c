#!/usr/bin/env bash
# A campaign's GPU seeds on a lent GPU machine: bash benchmarks/campaigns/gpu.sh NAME [MINUTES], from the repository
# root there, in each call of the device tool (benchmarks/campaign_gpu.py says why and how; docs/results/bert.md gives
# the calls). It receives the asset part the call carried and exits while parts are missing; once all are there it
# checks them, prints the versions, runs what is left of the GPU seeds, several processes on the one GPU, starting
# runs only while they should finish within MINUTES (default 8) of the call, and packs every GPU run's raw result into
# $OUT/campaign-NAME.tar.gz (back here: python -m benchmarks.campaign_gpu unpack NAME FILE).
#
# Environment: OUT (the device tool sets it), JOBS and THREADS (processes and threads each; default 4 x 4 on the 16
# cores), RUN_MINUTES (a run's expected minutes before any GPU run of the campaign is archived; default 5), PYTHON
# (default python3); CAMPAIGNS, ARCHIVE, RUNS (folders, for a test); GPU_SH_ALLOW_CPU=1 (run on a CPU: a test).
set -uo pipefail
NAME=${1:?usage: bash benchmarks/campaigns/gpu.sh NAME [MINUTES]}
MINUTES=${2:-8}
OUT=${OUT:?gpu.sh writes its results under \$OUT (the device tool sets it)}
JOBS=${JOBS:-4}
THREADS=${THREADS:-4}
RUN_MINUTES=${RUN_MINUTES:-5}
PYTHON=${PYTHON:-python3}
PACK_SECONDS=45  # packing the results after the runs: python and torch imports, then a small tar
START=$(date +%s)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
folders=()
[ -n "${CAMPAIGNS:-}" ] && folders+=(--campaigns "$CAMPAIGNS")
[ -n "${ARCHIVE:-}" ] && folders+=(--archive "$ARCHIVE")
[ -n "${RUNS:-}" ] && folders+=(--runs "$RUNS")

PYTHONPATH=. "$PYTHON" -m benchmarks.campaign_gpu receive
status=$?
[ "$status" -eq 3 ] && exit 0  # parts still missing: the next call brings the next one
[ "$status" -ne 0 ] && exit "$status"
# shellcheck source=/dev/null
source .gpu-assets/env.sh  # THESEUS_CACHE, PYTHONPATH (the repository, the wheels), THESEUS_SOURCE_COMMIT
"$PYTHON" -m benchmarks.campaign_gpu check "$NAME" "${folders[@]}" ${GPU_SH_ALLOW_CPU:+--allow-cpu} || {
    echo "gpu.sh: stopped before any run: the campaign cannot run on this machine as it is" >&2
    exit 1
}
[ -n "${GPU_SH_ALLOW_CPU:-}" ] && export CUDA_VISIBLE_DEVICES=""
"$PYTHON" -m benchmarks.campaign status "$NAME" "${folders[@]}"

SECONDS_LEFT=$((MINUTES * 60 - ($(date +%s) - START) - PACK_SECONDS))
if [ "$SECONDS_LEFT" -gt 30 ]; then
    FINISH_HOURS=$("$PYTHON" -c "print(($SECONDS_LEFT - 10) / 3600)")
    # timeout ends the runs still going at the limit (its whole process group: the compress processes too)
    timeout --kill-after=10 "$SECONDS_LEFT" "$PYTHON" -m benchmarks.campaign run "$NAME" "${folders[@]}" \
        --device gpu --jobs "$JOBS" --threads "$THREADS" --finish-hours "$FINISH_HOURS" --run-minutes "$RUN_MINUTES" \
        2>&1 | tee "$OUT/campaign-$NAME.log"
    echo "gpu.sh: the campaign exited with status ${PIPESTATUS[0]} after $(($(date +%s) - START)) s of the call"
else
    echo "gpu.sh: no time left to start a run ($SECONDS_LEFT s)" >&2
fi
"$PYTHON" -m benchmarks.campaign_gpu pack-results "$NAME" --out "$OUT" "${folders[@]}"
