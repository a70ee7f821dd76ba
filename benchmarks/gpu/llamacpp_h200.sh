#!/usr/bin/env bash
# llama.cpp on the H200 (issue 30, not yet run: the device lent no machine on 2026-12-04).
#
# Device side, one call, from /work/main with the carried folder .dev-preddata/ holding
#   llama.cpp/ (llama-cpp-python 0.3.36's vendored source, models/ and docs/ pruned) and
#   this script:
#     bash .dev-preddata/llamacpp_h200.sh  (writes every raw output under $OUT)
# Builds only llama-bench and llama-quantize for sm_90, writes a random-weight Llama-3.1-8B
# shape at F16 with gguf-py (from the llama.cpp source), quantizes it to Q8_0, Q6_K, Q5_K_M,
# Q4_K_M and MXFP4_MOE-free types, and runs llama-bench pp512/tg128 per type (-fa 1, -ngl 99).
# Before the call: commit servelab's predictions for those builds
#   (benchmarks/prereg/builds.py predict, with H200 rows added to POINTS as role "check").
set -euo pipefail
SRC=${SRC:-.dev-preddata/llama.cpp}
OUT=${OUT:?set by the device}
B=/tmp/lcb
cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >"$OUT/cmake.log" 2>&1
cmake --build "$B" --target llama-bench llama-quantize -j16 >"$OUT/build.log" 2>&1
PYTHONPATH="$SRC/gguf-py" python3 - <<'PY' >"$OUT/gguf.log" 2>&1
import numpy as np, gguf
L, H, F, V, NH, KV = 32, 4096, 14336, 128256, 32, 8
w = gguf.GGUFWriter("/tmp/l8b-f16.gguf", "llama")
w.add_block_count(L); w.add_context_length(8192); w.add_embedding_length(H)
w.add_feed_forward_length(F); w.add_head_count(NH); w.add_head_count_kv(KV)
w.add_rope_freq_base(500000.0); w.add_layer_norm_rms_eps(1e-5); w.add_file_type(1)
w.add_rope_dimension_count(128)
w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("default")
w.add_token_list([f"t{i}" for i in range(V)]); w.add_token_types([1] * V)
w.add_token_merges([])
rng = np.random.default_rng(0)
def t(name, *shape):
    a = (rng.standard_normal(shape, dtype=np.float32) * 0.02)
    w.add_tensor(name, a.astype(np.float16) if len(shape) > 1 else a)
t("token_embd.weight", V, H); t("output_norm.weight", H); t("output.weight", V, H)
for i in range(L):
    b = f"blk.{i}."
    t(b + "attn_norm.weight", H); t(b + "ffn_norm.weight", H)
    t(b + "attn_q.weight", H, H); t(b + "attn_k.weight", KV * 128, H)
    t(b + "attn_v.weight", KV * 128, H); t(b + "attn_output.weight", H, H)
    t(b + "ffn_gate.weight", F, H); t(b + "ffn_up.weight", F, H); t(b + "ffn_down.weight", H, F)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
for T in Q8_0 Q6_K Q5_K_M Q4_K_M; do
  "$B/bin/llama-quantize" /tmp/l8b-f16.gguf "/tmp/l8b-$T.gguf" "$T" 16 >>"$OUT/quantize.log" 2>&1
done
for T in f16 Q8_0 Q6_K Q5_K_M Q4_K_M; do
  "$B/bin/llama-bench" -m "/tmp/l8b-$T.gguf" -p 512 -n 128 -fa 1 -ngl 99 -o md \
    >>"$OUT/llama-bench.md" 2>>"$OUT/llama-bench.err"
done
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
