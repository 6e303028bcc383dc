#!/usr/bin/env bash
# One pass of measurements on a GPU box (16 cores, one GPU): the throughput issue's "train >= 0.6 x raw on a GPU
# box", a short doom_basic training run on the GPU, and atari_breakout's frames/s. Results: results/gpu_box.md.
#   bash benchmarks/studies/gpu_box.sh OUT_DIR [SECONDS]
# Packages the box lacks are installed first from .whl/ if that folder exists (the device tool carries them).
out=${1:?usage: gpu_box.sh OUT_DIR [SECONDS]}; seconds=${2:-20}; device=${DEVICE:-cuda}
workers=${WORKERS:-14}  # 16 cores: 14 rollout workers, the policy worker and the learner beside them
mkdir -p "$out"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "cores: $(nproc); $(python3 --version)"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())"

bench() {  # NAME, then bench flags
    local name=$1; shift
    echo "=== bench $name"
    timeout 240 python3 -m asyncrl bench --device "$device" --num_workers "$workers" --seconds "$seconds" \
        --warmup_seconds 10 --cost_seconds 1 --out "$out/$name.json" "$@" 2>&1 | grep -v "^\[" | tail -12
}
bench doom_basic --env doom_basic --num_envs_per_worker 16 --mode raw,sampler,train
bench doom_basic_batch4096 --env doom_basic --num_envs_per_worker 16 --batch_size 4096 --mode train

echo "=== train doom_basic on $device for ${TRAIN_SECONDS:-90} s"
timeout 200 python3 -m asyncrl train --env doom_basic --device "$device" --num_workers "$workers" \
    --num_envs_per_worker 16 --train_for_seconds "${TRAIN_SECONDS:-90}" --train_dir /tmp/gpu_box \
    --experiment doom_basic --experiment_summaries_interval 5 > "$out/train_doom_basic.log" 2>&1
echo "exit $?"; tail -3 "$out/train_doom_basic.log"
cp /tmp/gpu_box/doom_basic/stats.jsonl "$out/train_doom_basic.jsonl"

bench atari_breakout --env atari_breakout --mode raw,train
