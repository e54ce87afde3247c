#!/usr/bin/env bash
# GCN PolBlogs, every method, compute-matched: a method given the steps that make its wall-clock the best Theseus variant's,
# STEPS = 200 x (the variant's seconds / the method's, both as ratios to plain Theseus' within the same runs:
# `python -m benchmarks.methods` prints them), at its own chosen LR, on each seed's own predecessor
# (--predecessor-from), so that it pairs with that seed's step-matched runs. Usage: gcn-polblogs-compute-matched.sh
# METHOD LR STEPS (e.g. truncated 5e-3 396); DISTILL_ON=all for the few-labels cell. Writes
# runs/i24/gcn[-all]/compute-matched/METHOD-STEPS/seed<N>, for `benchmarks.methods --matched`. Rerun to resume.
cd "$(dirname "$0")/../.."
method=$1 lr=$2 steps=$3
[ -n "$steps" ] || { echo "usage: $0 METHOD LR STEPS" >&2; exit 2; }
distill_on=${DISTILL_ON:-labelled}
root=runs/i24/gcn; [ $distill_on = labelled ] || root=runs/i24/gcn-$distill_on
[[ $lr =~ ^[0-9.]+e-[0-9]+$ && $steps =~ ^[0-9]+$ ]] || { echo "usage: $0 METHOD LR STEPS (e.g. kd 4e-2 303)" >&2; exit 2; }
dir=$root/compute-matched/$method-$steps
config="{\"replacing\": {\"lr\": $lr, \"steps\": $steps}, \"options\": {\"distill_on\": \"$distill_on\"}}"
if [ -f $dir/config.json ] && [ "$(cat $dir/config.json)" != "$config" ]; then
  echo "$dir holds runs of another config ($(cat $dir/config.json)): move it away first" >&2; exit 2
fi
mkdir -p $dir
echo "$config" > $dir/config.json
for seed in 0 1 2 3 4; do
  out=$dir/seed$seed
  [ -f $out/report.json ] && continue
  extra="--predecessor-from $root/lr1e-2/seed$seed"; [ -f $out/checkpoint.pt ] && extra=--resume
  OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe gcn-polblogs --methods $method \
    --config $dir/config.json --seed $seed --threads 1 --no-progress --out $out $extra \
    > $dir/seed$seed.log 2>&1 || echo "failed $out" >> $root/failures.log
done
