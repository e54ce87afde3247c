#!/usr/bin/env bash
# Issue 24 cell (d), the schedule stage: after the learning-rate grid (issue24-gcn-grid.sh), the Theseus variants at
# the rate the best variant chose, over base rates b in {0.1, 0.3, 0.5} x p = 1 at {1/4, 1/2, 3/4} of the 200 steps
# (the lr grid's own point, b 0.3 at step 100, is not run again): a coarse grid, for the Theseus variants only (the
# baselines have no schedule). Each run borrows its seed's predecessor from the lr grid, so that every setting pairs.
# Usage: issue24-gcn-schedule-grid.sh LR (as the grid spells it, e.g. 2e-2). Rerun to resume.
cd "$(dirname "$0")/../.."
lr=$1
[ -f benchmarks/configs/replacing-lr-$lr.json ] || { echo "no benchmarks/configs/replacing-lr-$lr.json" >&2; exit 2; }
METHODS=theseus,theseus+warmup,theseus+kd,theseus+warmup+kd
for seed in 0 1 2 3 4; do
  for b in 0.1 0.3 0.5; do
    for one in 50 100 150; do
      [ $b = 0.3 ] && [ $one = 100 ] && continue
      out=runs/i24/gcn/lr$lr-b$b-one$one/seed$seed
      [ -f $out/report.json ] && continue
      extra="--predecessor-from runs/i24/gcn/lr$lr/seed$seed"; [ -f $out/checkpoint.pt ] && extra=--resume
      mkdir -p $(dirname $out)
      echo "{\"replacing\": {\"lr\": $lr}, \"schedule_base\": $b, \"steps_to_one\": $one}" > $(dirname $out)/config.json
      OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe gcn-polblogs --methods $METHODS \
        --config $(dirname $out)/config.json --seed $seed --threads 1 --no-progress --out $out $extra \
        > $(dirname $out)/seed$seed.log 2>&1 || echo "failed $out" >> runs/i24/gcn/failures.log
    done
  done
done
