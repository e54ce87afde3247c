#!/usr/bin/env bash
# Issue 24 cell (d), compute-matched: truncated fine-tuning given the wall-clock of the best Theseus variant
# (theseus+warmup+kd, 1.71x plain Theseus' seconds within the same runs, against truncated's 0.69x:
# benchmarks/results/methods-gcn-polblogs-lr1e-2.md), i.e. 200 x 1.71 / 0.69 = 496 steps at its chosen lr 1e-2, on
# each seed's own predecessor (--predecessor-from), so it pairs with that seed's step-matched run. Rerun to resume.
cd "$(dirname "$0")/../.."
for seed in 0 1 2 3 4; do
  out=runs/i24/gcn/compute-matched/seed$seed
  [ -f $out/report.json ] && continue
  extra="--predecessor-from runs/i24/gcn/lr1e-2/seed$seed"; [ -f $out/checkpoint.pt ] && extra=--resume
  OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe gcn-polblogs --methods truncated \
    --config benchmarks/configs/issue24-gcn-compute-matched.json --seed $seed --threads 1 --no-progress --out $out \
    $extra > runs/i24/gcn/compute-matched-seed$seed.log 2>&1 || echo "failed seed=$seed" >> runs/i24/gcn/failures.log
done
