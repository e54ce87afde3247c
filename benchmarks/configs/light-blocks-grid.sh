#!/usr/bin/env bash
# Light ResNet blocks, every method: ResNet-34 -> 8 MobileNetV2 / ShuffleNetV2 blocks on Fashion-MNIST, every method in one run per
# (kind, seed), one thread per run. Seed 0 of MobileNetV2 trains the shared ResNet-34 predecessor (1,812 steps); every
# other run borrows it (SOURCE_RUN=DIR borrows another run's, e.g. one made with METHODS=truncated, which trains the
# same predecessor: it depends on the seed only). LRS="1.5e-4 3e-4 6e-4": a learning-rate grid instead, each rate's
# runs in runs/i24/resnet/KIND-grid/lr<LR>/seed<N> (for `benchmarks.methods`); with WARMUP=0.5 also, +warmup's
# share of the budget (warmup_fraction) in lr<LR>-warm<W>/seed<N>; TAG=direct names the setting lr<LR>-direct (e.g.
# METHODS=truncated apart from the variant's runs at that rate). Usage: light-blocks-grid.sh KIND
# [SEEDS...] (KIND: mobilenet-v2 | shufflenet-v2). Rerun to resume: finished runs are kept, interrupted ones resume
# from their checkpoint.
cd "$(dirname "$0")/../.."
METHODS=${METHODS:-theseus,theseus+warmup,theseus+warmup+kd,truncated,kd}
kind=$1; shift
if [ -n "$WARMUP" ] && { [ -z "$LRS" ] || ! [[ $WARMUP =~ ^0\.[0-9]+$ ]]; }; then
  echo "WARMUP=$WARMUP: a fraction like 0.5, with LRS (its runs are a grid point)" >&2; exit 2
fi
source_run=${SOURCE_RUN:-runs/i24/resnet/mobilenet-v2/seed0}
seeds=("$@"); [ ${#seeds[@]} -eq 0 ] && seeds=(0 1 2 3 4)
for seed in "${seeds[@]}"; do
  for lr in ${LRS:-recipe}; do
    out=runs/i24/resnet/$kind/seed$seed; config=""
    if [ $lr != recipe ]; then
      setting=lr$lr; warmup=""
      if [ -n "$WARMUP" ]; then setting=$setting-warm$WARMUP; warmup=", \"warmup_fraction\": $WARMUP"; fi
      [ -n "$TAG" ] && setting=$setting-$TAG
      out=runs/i24/resnet/$kind-grid/$setting/seed$seed; mkdir -p $(dirname $out)
      echo "{\"replacing\": {\"lr\": $lr}$warmup}" > $(dirname $out)/config.json
      config="--config $(dirname $out)/config.json"
    fi
    [ -f $out/report.json ] && continue
    extra=""
    if [ -f $out/checkpoint.pt ]; then extra=--resume
    elif [ $out != $source_run ]; then extra="--predecessor-from $source_run"; fi
    mkdir -p $(dirname $out)
    OMP_NUM_THREADS=1 .venv/bin/python -m theseus_zoo.cli compress --recipe resnet-fashion-mnist-$kind --methods $METHODS \
      $config --seed $seed --threads 1 --no-progress --out $out $extra \
      > $out.log 2>&1 || echo "failed $out" >> runs/i24/resnet/failures.log
  done
done
