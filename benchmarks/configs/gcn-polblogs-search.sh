#!/usr/bin/env bash
# GCN PolBlogs, a successor per group under a latency budget against the uniform 2-layer alternatives, 5 seeds, one
# run at a time on one thread, every method at the recipe's rate (1e-2; no grid yet): the searched model
# (theseus+warmup+kd over 3 groups of 2 layers, candidates keep / skip / one, --budget latency=$BUDGET) and, in one
# run per seed, theseus+warmup+kd, truncated fine-tuning and KD into the recipe's uniform 2-layer model. Rerun to
# resume (finished runs are kept); python -m benchmarks.search_table runs/budget-gcn writes the table.
cd "$(dirname "$0")/../.."
budget=${BUDGET:-0.4}
root=${ROOT:-runs/budget-gcn}
mkdir -p $root
echo '{"options": {"num_layers": 3}}' > $root/search.json
for seed in 0 1 2 3 4; do
  for kind in search uniform; do
    out=$root/$kind/seed$seed
    [ -f $out/report.json ] && continue
    resume=""; [ -f $out/checkpoint.pt ] && resume=--resume
    mkdir -p $root/$kind
    if [ $kind = search ]; then
      args="--methods theseus+warmup+kd --config $root/search.json --budget latency=$budget,steps=100"
    else
      args="--methods theseus+warmup+kd,truncated,kd"
    fi
    OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe gcn-polblogs $args --seed $seed \
      --threads 1 --no-progress --out $out $resume > $root/$kind/seed$seed.log 2>&1 || echo "failed $out" >> $root/failures.log
  done
done
