#!/usr/bin/env bash
# GPU check for the Whisper engine (issue 19): the CUDA tests, then the offline and live
# benchmarks on the GPU, in under 10 minutes on one CUDA machine. Run from the repository root:
#     bash benchmarks/gpu_check.sh            # results in $OUT (default ./gpu_check_out)
# Needs the dev speech data beside the checkout (../shared/data/speech or OASR_SPEECH_DATA).
set -euo pipefail
PY=${PY:-python}
OUT=${OUT:-gpu_check_out}
mkdir -p "$OUT"
$PY -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"; print(torch.cuda.get_device_name(0))' \
  | tee "$OUT/device.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$OUT/device.txt" 2>/dev/null || true
# 1. the CUDA paths (float16, beam, word timestamps, live) and the int8 kernel checks
timeout 240 $PY -m pytest -q -p no:cacheprovider tests/engine/whisper/test_cuda.py tests/engine/whisper/test_int8.py \
  -k "not dev_set" 2>&1 | tee "$OUT/tests.txt"
# 2. offline: the engine on the GPU (device auto) against faster-whisper on the CPU, one run
timeout 240 $PY -m benchmarks.offline --repeat 1 --skip-float32 2>&1 | tail -15 | tee "$OUT/offline.txt"
# 3. live: paced multi-utterance sessions in process on the GPU
timeout 180 $PY -m benchmarks.streaming_capacity --sessions 8 16 2>&1 | tail -6 | tee "$OUT/live.txt"
