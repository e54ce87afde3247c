#!/usr/bin/env bash
# GCN PolBlogs, every method at its own settings: GCN PolBlogs 6 -> 2, every method in one run per (lr, seed), one run at a time on one thread;
# seed by seed, each over the grid (the recipe's lr 1e-2 first), so that whatever is finished is a complete grid on
# its seeds; LRS="4e-2" adds a rate to a finished grid. DISTILL_ON=all: few labels on a graph (123
# labelled nodes) where the distilling methods match the predecessor's logits on every node, the 1,099 unlabelled
# ones too (option distill_on), in runs/i24/gcn-all. Rerun to resume (finished runs are kept).
cd "$(dirname "$0")/../.."
METHODS=theseus,theseus+warmup,theseus+kd,theseus+warmup+kd,truncated,kd,scratch
distill_on=${DISTILL_ON:-labelled}
root=runs/i24/gcn; [ $distill_on = labelled ] || root=runs/i24/gcn-$distill_on
for seed in 0 1 2 3 4; do
  for lr in ${LRS:-1e-2 5e-3 2e-2}; do
    out=$root/lr$lr/seed$seed
    [ -f $out/report.json ] && continue
    resume=""; [ -f $out/checkpoint.pt ] && resume=--resume
    mkdir -p $root/lr$lr
    echo "{\"replacing\": {\"lr\": $lr}, \"options\": {\"distill_on\": \"$distill_on\"}}" > $root/lr$lr/config.json
    OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe gcn-polblogs --methods $METHODS \
      --config $root/lr$lr/config.json --seed $seed --threads 1 --no-progress --out $out $resume \
      > $root/lr$lr/seed$seed.log 2>&1 || echo "failed $out" >> $root/failures.log
  done
done
