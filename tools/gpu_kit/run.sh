#!/usr/bin/env bash
# The whole GPU run, on the lent GPU machine (docs/generation.md, "GPU kit"):
# builds the project against the PyTorch there with the carried Debian
# packages (tools/gpu_kit/prepare.sh), runs the engine adapters inside vLLM,
# SGLang and transformers where the image has them
# (tools/gpu_kit/engines_live_check.py) and the torch-gpu tests, measures the verification
# cost curve t(n)/t(1), n = 1..128, of random 7B-shaped (fp16, bf16) and
# 1B-shaped models, end-to-end tokens/s per policy with a random model, and the
# draft-model policies (model, sam-model) with a random target/draft pair;
# writes every figure into $OUT/gpu_kit.json (plus the logs).
#
#   device: run(command="bash tools/gpu_kit/run.sh", carry=[".gpukit"], timeout_s=600)
#   here:   SAM_KIT_REHEARSE=1 bash tools/gpu_kit/run.sh    # CPU, tiny shapes, Debian libtorch
#
# Switches: SAM_KIT_REHEARSE=1 (CPU rehearsal: tiny models, the system's
# libtorch and packages), SAM_KIT_BUILD (build folder, default build-gpu),
# SAM_KIT_JOBS (default: all cores), SAM_KIT_STEPS (the steps to run, of
# engines,tests,curves,generate,pair,sdsat; default all: a short lease can run
# the rest later), SAM_KIT_DTYPES (the cost curves' dtypes, default fp16,bf16),
# OUT (default /tmp/gpu_kit_out).
set -uo pipefail
cd "$(dirname "$0")/../.."
kit=$PWD/.gpukit
out=${OUT:-/tmp/gpu_kit_out}
build=${SAM_KIT_BUILD:-build-gpu}
jobs=${SAM_KIT_JOBS:-$(nproc)}
rehearse=${SAM_KIT_REHEARSE:-0}
steps=,${SAM_KIT_STEPS:-engines,tests,curves,generate,pair,sdsat},
want() { [[ $steps == *,$1,* ]]; }
mkdir -p "$out"
log() { echo "[gpu_kit $(date +%T)] $*" | tee -a "$out/steps.log"; }
fail() { log "FAILED: $*"; python3 tools/gpu_kit/collect.py "$out" || true; exit 1; }
[[ -d $kit/data ]] || { echo "run.sh: $kit is missing: run tools/gpu_kit/prepare.sh first" >&2; exit 2; }

if [[ $rehearse == 1 ]]; then
  device=cpu; dtypes=(fp32); py=/usr/bin/python3
  big=(--layers 2 --hidden 128 --heads 4 --kv-heads 4 --intermediate 256)
  small=(--layers 1 --hidden 64 --heads 4 --kv-heads 4 --intermediate 128)
  gen_shape=(--layers 1 --hidden 64 --heads 4 --intermediate 128)
  repeats=2; prompts=2; new_tokens=16
  prefix_path=
else
  device=cuda; dtypes=(fp16 bf16); py=python3
  big=(--layers 32 --hidden 4096 --heads 32 --kv-heads 32 --intermediate 11008)    # Llama-2-7B
  small=(--layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192)    # Llama-3.2-1B
  gen_shape=(--layers 16 --hidden 2048 --heads 32 --intermediate 8192)
  repeats=10; prompts=6; new_tokens=64
  # The carried packages, unpacked outside / (the image's own stay untouched).
  deps=/tmp/sam-deps
  rm -rf "$deps" && mkdir -p "$deps"
  for f in "$kit"/debs/*.deb; do dpkg -x "$f" "$deps" || fail "dpkg -x $f"; done
  export PATH=$deps/usr/bin:$PATH
  export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$deps
  export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  prefix_path="$deps/usr;$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')"
fi
# SAM_KIT_DTYPES=fp16 (say): the cost curves of those dtypes only.
[[ -n ${SAM_KIT_DTYPES:-} ]] && IFS=, read -ra dtypes <<< "$SAM_KIT_DTYPES"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  git rev-parse HEAD 2>/dev/null; nproc; } > "$out/environment.txt"
log "environment: $(tr '\n' ' ' < "$out/environment.txt")"

# 1. Build (Release) against that PyTorch.
# With Ninja, a build keeps going past a failed file (-k 0), so that one log names them all.
gen=() keep=(); command -v ninja >/dev/null && gen=(-G Ninja) keep=(-- -k 0)
cfg=(-DCMAKE_BUILD_TYPE=Release -DSAM_BUILD_BENCHMARKS=ON)
[[ -n $prefix_path ]] && cfg+=("-DCMAKE_PREFIX_PATH=$prefix_path" -DPython_EXECUTABLE="$(command -v $py)"
                               -DCMAKE_CUDA_ARCHITECTURES=90)
if $py -c 'import pybind11' 2>/dev/null; then cfg+=("-Dpybind11_DIR=$($py -m pybind11 --cmakedir)"); fi
log "configure"
torch=1
if ! cmake -S . -B "$build" "${gen[@]}" "${cfg[@]}" > "$out/configure.log" 2>&1 ||
   grep -q "the torch backend and sam-generate are not built" "$out/configure.log"; then
  # Without libtorch the engine check still runs (the Python module does not use it).
  log "configure with libtorch failed (configure-torch.log): again without it"
  mv "$out/configure.log" "$out/configure-torch.log"; torch=0; rm -rf "$build"
  cmake -S . -B "$build" "${gen[@]}" "${cfg[@]}" -DSAM_WITH_TORCH=OFF > "$out/configure.log" 2>&1 ||
    fail "configure (configure.log)"
fi
# What the engine check needs first, so that a failure in the rest leaves it its result.
log "build the Python module and sam-build ($jobs jobs)"
start=$SECONDS
cmake --build "$build" -j "$jobs" --target samdecoding_native samdecoding_python_files sam-build \
    "${keep[@]}" > "$out/build.log" 2>&1 || fail "build (build.log)"
log "built in $((SECONDS - start)) s"

# An index for the runs below (GSM8K train: small, enough for costs).
"$build/bin/sam-build" --tokenizer "$kit/data/tokenizer/llama-32k.model" \
    --corpus gsm8k="$kit/data/gsm8k/train.jsonl" -o "$build/kit-gsm8k.sam" > "$out/sam_build.log" 2>&1 ||
    log "sam-build failed"

# 2. The engine adapters inside the engines the image has (first: the run's main check),
# then the GPU tests (each at most 150 s, so that a hung test leaves time for the rest).
if ! want engines; then
  log "engines: not asked for (SAM_KIT_STEPS)"
elif [[ -d $build/python/samdecoding ]]; then
  # vLLM, SGLang and transformers, where the image has them, run with the adapters.
  $py tools/gpu_kit/engines_live_check.py --device "$device" --index "$build/kit-gsm8k.sam" \
      --native "$build/python/samdecoding/_native*.so" --out "$out" > "$out/engines_live.log" 2>&1
  log "engines: $(grep -E '^(engines|PASS|FAIL)' "$out/engines_live.log" | tr '\n' ';')"
else
  log "engines: not checked ($build/python/samdecoding was not built: no pybind11?)"
fi
# Everything below needs libtorch.
((torch)) || fail "libtorch not found (configure-torch.log): no GPU tests or figures"
log "build the rest"
start=$SECONDS
cmake --build "$build" -j "$jobs" "${keep[@]}" > "$out/build-rest.log" 2>&1 ||
  fail "build (build-rest.log)"
log "built in $((SECONDS - start)) s"
label=torch-gpu; [[ $rehearse == 1 ]] && label=torch
if want tests; then
  ctest --test-dir "$build" -L "$label" --timeout 150 --output-on-failure > "$out/ctest.log" 2>&1
  log "ctest -L $label: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
  # A failed test again, directly: output line-buffered (a crash loses gtest's buffered
  # lines under ctest), and under cuda-gdb, where the image has it, for a backtrace.
  for t in $(sed -n 's/^[[:space:]]*[0-9]* - \([A-Za-z_]*\.[A-Za-z_]*\) .*/\1/p' "$out/ctest.log"); do
    for b in "$build"/bin/torch_model_test "$build"/bin/torch_generate_test; do
      "$b" --gtest_list_tests --gtest_filter="$t" | grep -q "^  " || continue
      log "again: $t"
      timeout 120 stdbuf -oL -eL "$b" --gtest_filter="$t" > "$out/again_$t.log" 2>&1
      command -v cuda-gdb > /dev/null &&
        timeout 180 cuda-gdb -q -batch -ex run -ex bt --args "$b" --gtest_filter="$t" \
          > "$out/backtrace_$t.log" 2>&1
    done
  done
fi

# 3. Cost curves t(n)/t(1), n = 1..128 (chain and tree).
if want curves; then
  sizes=1,2,4,8,12,16,24,32,40,48,64,80,96,128
  for d in "${dtypes[@]}"; do
    log "cost curve, 7B-shaped, $d"
    "$build/bin/bench-forward" "${big[@]}" --vocab 32000 --prefix 512 --repeats "$repeats" \
        --device "$device" --dtype "$d" --sizes "$sizes" > "$out/forward_7b_$d.log" 2>&1 ||
        log "bench-forward 7B $d failed"
  done
  log "cost curve, 1B-shaped, ${dtypes[-1]}"
  "$build/bin/bench-forward" "${small[@]}" --vocab 32000 --prefix 512 --repeats "$repeats" \
      --device "$device" --dtype "${dtypes[-1]}" --sizes "$sizes" > "$out/forward_1b.log" 2>&1 ||
      log "bench-forward 1B failed"
fi

# 4. End to end with a random model (acceptance means nothing there; the costs do).
if want generate; then
  policies=(--policy sam --policy sam-cal --policy sam-rec)
  log "end to end: ${policies[*]}"
  "$build/bin/bench-generate" --tokenizer "$kit/data/tokenizer/llama-32k.model" --data-dir "$kit/data" \
      --index "$build/kit-gsm8k.sam" "${policies[@]}" "${gen_shape[@]}" --repeats "$repeats" \
      --prompts "$prompts" --max-new-tokens "$new_tokens" --device "$device" \
      > "$out/generate_1b.log" 2>&1 || log "bench-generate failed"
fi

# 5. The draft-model policies with a random pair (a 1B-shaped target, a small
# draft), through sam-generate (--json: tokens/s, MAT), against plain decoding.
if want pair || want sdsat; then
  pair=$build/kit-pair
  if [[ $rehearse == 1 ]]; then tgt=(--layers 2 --hidden 64); dft=(--layers 1 --hidden 32)
  else tgt=(--layers 16 --hidden 2048); dft=(--layers 2 --hidden 512); fi
  "$build/bin/bench-random-model" --out "$pair/target" --tokenizer "$kit/data/tokenizer/llama-32k.model" \
      "${tgt[@]}" --force > "$out/pair.log" 2>&1 &&
  "$build/bin/bench-random-model" --out "$pair/draft" --tokenizer "$kit/data/tokenizer/llama-32k.model" \
      "${dft[@]}" --seed 2 --force >> "$out/pair.log" 2>&1 || log "random pair failed"
  question=$($py -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["question"])' \
      "$kit/data/gsm8k/test.jsonl")
fi
if want pair; then
  log "draft-model policies (random pair)"
  for run in plain sam sam-cal model sam-model sam-cal+model; do
    args=(--policy "${run%+model}"); [[ $run == plain ]] && args=(--no-spec)
    [[ $run == model || $run == sam-model || $run == sam-cal+model ]] && args+=(--draft-model "$pair/draft")
    "$build/bin/sam-generate" --model "$pair/target" --tokenizer "$kit/data/tokenizer/llama-32k.model" \
        --index "$build/kit-gsm8k.sam" --prompt "$question" --append-newline --max-new-tokens "$new_tokens" \
        --device "$device" --json "${args[@]}" 2>> "$out/pair.log" |
      $py -c 'import json,sys; r=json.load(sys.stdin); print("JSON " + json.dumps({"bench": "draft_pair",
          "run": sys.argv[1], "tokens_per_s": r.get("tokens_per_s"), "mat": r.get("mat"),
          "new_tokens": r.get("new_tokens"), "steps": r.get("steps")}))' "$run" >> "$out/draft_pair.log" ||
      log "sam-generate $run failed"
  done
fi

# 6. SDSAT's schemes on the random target (adaptive id 31999; acceptance means nothing with
# random weights, the cost of a pass carrying the adaptive branches does): seconds per pass.
if want sdsat; then
  log "SDSAT schemes (random target)"
  for run in plain sdsat-one sdsat-two sam-sdsat sam-cal-sdsat; do
    case $run in
      plain) args=(--no-spec);;
      sdsat-one) args=(--policy sdsat --sdsat-tokens 31999 --sdsat-k 4);;
      sdsat-two) args=(--policy sdsat --sdsat-tokens 31999 --sdsat-k 4 --sdsat-scheme two-pass);;
      sam-sdsat) args=(--policy sam-sdsat --sdsat-tokens 31999 --sdsat-k 4);;
      sam-cal-sdsat) args=(--policy sam-cal --sdsat-tokens 31999 --sdsat-k 4);;
    esac
    "$build/bin/sam-generate" --model "$pair/target" --tokenizer "$kit/data/tokenizer/llama-32k.model" \
        --index "$build/kit-gsm8k.sam" --prompt "$question" --append-newline --max-new-tokens "$new_tokens" \
        --device "$device" --json "${args[@]}" 2>> "$out/sdsat.log" |
      $py -c 'import json,sys; r=json.load(sys.stdin); s=r.get("sdsat", {}); print("JSON " + json.dumps({
          "bench": "sdsat", "run": sys.argv[1], "tokens_per_s": r.get("tokens_per_s"), "mat": r.get("mat"),
          "steps": r.get("steps"), "verified_tokens": r.get("verified_tokens"),
          "adaptive_tokens": s.get("adaptive_tokens_evaluated", 0),
          "ms_per_pass": 1000 * r["decode_seconds"] / max(r["steps"], 1)}))' "$run" >> "$out/sdsat_runs.log" ||
      log "sam-generate $run failed"
  done
fi

python3 tools/gpu_kit/collect.py "$out" && log "figures: $out/gpu_kit.json"
