#!/usr/bin/env bash
# GCN PolBlogs, every method, the schedule stage: after the learning-rate grid (gcn-polblogs-grid.sh), the Theseus variants at
# the rate the best variant chose, over base rates b in {0.1, 0.3, 0.5} x p = 1 at {1/4, 1/2, 3/4} of the 200 steps
# (the lr grid's own point, b 0.3 at step 100, is not run again): a coarse grid, for the Theseus variants only (the
# baselines have no schedule). Each run borrows its seed's predecessor from the lr grid, so that every setting pairs.
# DISTILL_ON=all: the same for the few-labels cell (runs/i24/gcn-all). Usage: gcn-polblogs-schedule-grid.sh LR (as
# the grid spells it, e.g. 2e-2). Rerun to resume.
cd "$(dirname "$0")/../.."
lr=$1
[[ $lr =~ ^[0-9.]+e-[0-9]+$ ]] || { echo "usage: $0 LR (as the lr grid spells it, e.g. 2e-2)" >&2; exit 2; }
METHODS=theseus,theseus+warmup,theseus+kd,theseus+warmup+kd
distill_on=${DISTILL_ON:-labelled}
root=runs/i24/gcn; [ $distill_on = labelled ] || root=runs/i24/gcn-$distill_on
for seed in 0 1 2 3 4; do
  for b in 0.1 0.3 0.5; do
    for one in 50 100 150; do
      [ $b = 0.3 ] && [ $one = 100 ] && continue
      setting=$root/lr$lr-b$b-one$one; out=$setting/seed$seed
      [ -f $out/report.json ] && continue
      extra="--predecessor-from $root/lr$lr/seed$seed"; [ -f $out/checkpoint.pt ] && extra=--resume
      mkdir -p $setting
      echo "{\"replacing\": {\"lr\": $lr}, \"schedule_base\": $b, \"steps_to_one\": $one, \"options\": {\"distill_on\": \"$distill_on\"}}" > $setting/config.json
      OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe gcn-polblogs --methods $METHODS \
        --config $setting/config.json --seed $seed --threads 1 --no-progress --out $out $extra \
        > $setting/seed$seed.log 2>&1 || echo "failed $out" >> $root/failures.log
    done
  done
done
