#!/usr/bin/env bash
# Light ResNet blocks, every method, compute-matched: a method given the steps that make its wall-clock the best Theseus variant's,
# STEPS = 600 / (the method's seconds / the variant's, within the same runs: `python -m benchmarks.methods` prints
# it as the wall-clock ratio when the variant is the runs' first method), at its own chosen LR, on the shared ResNet-34
# (--predecessor-from SOURCE_RUN, as every grid run), so that it pairs with the step-matched runs. Usage:
# light-blocks-compute-matched.sh KIND METHOD LR STEPS [SEEDS...] (e.g. mobilenet-v2 kd 2.4e-3 522). Writes
# runs/i24/resnet/KIND-grid/compute-matched/METHOD-STEPS/seed<N>, for `benchmarks.methods --matched`. Rerun to resume.
cd "$(dirname "$0")/../.."
kind=$1 method=$2 lr=$3 steps=$4; shift 4 2>/dev/null || true
[[ $kind =~ ^(mobilenet-v2|shufflenet-v2)$ && $lr =~ ^[0-9.]+e-[0-9]+$ && $steps =~ ^[0-9]+$ ]] || {
  echo "usage: $0 mobilenet-v2|shufflenet-v2 METHOD LR STEPS [SEEDS...] (e.g. mobilenet-v2 kd 2.4e-3 522)" >&2; exit 2; }
seeds=("$@"); [ ${#seeds[@]} -eq 0 ] && seeds=(0 1 2 3 4)
source_run=${SOURCE_RUN:-runs/i24/resnet/predecessor-seed0}
dir=runs/i24/resnet/$kind-grid/compute-matched/$method-$steps
config="{\"replacing\": {\"lr\": $lr, \"steps\": $steps}}"
if [ -f $dir/config.json ] && [ "$(cat $dir/config.json)" != "$config" ]; then
  echo "$dir holds runs of another config ($(cat $dir/config.json)): move it away first" >&2; exit 2
fi
mkdir -p $dir
echo "$config" > $dir/config.json
for seed in "${seeds[@]}"; do
  out=$dir/seed$seed
  [ -f $out/report.json ] && continue
  extra="--predecessor-from $source_run"; [ -f $out/checkpoint.pt ] && extra=--resume
  OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe resnet-fashion-mnist-$kind --methods $method \
    --config $dir/config.json --seed $seed --threads 1 --no-progress --out $out $extra \
    > $dir/seed$seed.log 2>&1 || echo "failed $out" >> runs/i24/resnet/failures.log
done
