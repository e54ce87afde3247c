#!/usr/bin/env bash
# Issue 24 cell (d): GCN PolBlogs 6 -> 2, every method in one run per (lr, seed), one run at a time on one thread;
# seed by seed, each over the grid (the recipe's lr 1e-2 first), so that whatever is finished is a complete grid on
# its seeds. Rerun to resume (finished runs are kept).
cd "$(dirname "$0")/../.."
METHODS=theseus,theseus+warmup,theseus+kd,theseus+warmup+kd,theseus+kd+unfreeze,theseus+warmup+kd+unfreeze,truncated,kd,scratch
mkdir -p runs/i24/gcn
for seed in 0 1 2 3 4; do
  for lr in 1e-2 5e-3 2e-2; do
    out=runs/i24/gcn/lr$lr/seed$seed
    [ -f $out/report.json ] && continue
    resume=""; [ -f $out/checkpoint.pt ] && resume=--resume
    OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe gcn-polblogs --methods $METHODS \
      --config benchmarks/configs/replacing-lr-$lr.json --seed $seed --threads 1 --no-progress --out $out $resume \
      > runs/i24/gcn/lr$lr-seed$seed.log 2>&1 || echo "failed lr=$lr seed=$seed" >> runs/i24/gcn/failures.log
  done
done
