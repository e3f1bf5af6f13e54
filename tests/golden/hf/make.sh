#!/usr/bin/env bash
# Writes the golden Hugging Face folders of this directory with transformers v4.47.1's own
# modeling code (../shared/hf_reference/make_ref.py: tiny random checkpoints in the exact Hugging
# Face layout, their float64 logits for a seeded 37-token prompt, the 8 greedy tokens of
# generate()). Run from anywhere: tests/golden/hf/make.sh [HF_REFERENCE_DIR]. The folders are
# committed; tests read them (tests/integration/hf_golden_test.py) and never run this.
# mamba2_groups4 holds llama.cpp's logits instead (llamacpp_reference.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ref="${1:-$here/../../../../shared/hf_reference}"
make() { local name=$1; shift; rm -rf "$here/$name"; /usr/bin/python3 "$ref/make_ref.py" --out "$here/$name" "$@"; }
make llama_gqa --arch llama
make llama_mqa --arch llama --set num_key_value_heads=1
make llama_head_dim_biases --arch llama --set head_dim=32 --set attention_bias=true --set mlp_bias=true
make llama_rope_linear --arch llama --set 'rope_scaling={"rope_type":"linear","factor":2.0}'
make llama_rope_dynamic --arch llama --set max_position_embeddings=40 \
  --set 'rope_scaling={"rope_type":"dynamic","factor":2.0}'
make llama_rope_yarn --arch llama --set max_position_embeddings=32 \
  --set 'rope_scaling={"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32}'
make llama_rope_longrope --arch llama --set max_position_embeddings=64 \
  --set original_max_position_embeddings=16 \
  --set 'rope_scaling={"rope_type":"longrope","short_factor":[1.0,1.1,1.2,1.3,1.5,1.8,2.0,2.5],"long_factor":[1.0,1.5,2.0,3.0,4.0,6.0,8.0,12.0]}'
make llama_rope_llama3 --arch llama \
  --set 'rope_scaling={"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":16}'
make mistral_window8 --arch mistral
make qwen2_biases_tied --arch qwen2
make falcon_mamba --arch falcon_mamba
make mamba --arch mamba
make mamba2 --arch mamba2
make jamba --arch jamba
make zamba --arch zamba
make zamba_heads4_untied --arch zamba --set n_mamba_heads=4 --set num_key_value_heads=4 \
  --set tie_word_embeddings=false --set attn_layer_period=2 --set attn_layer_offset=0
# Several groups: transformers' multi-group Mamba-2 is wrong before v4.52 (llamacpp_reference.py
# says how), so the weights are transformers' and the references llama.cpp's.
make mamba2_groups4 --arch mamba2 --set n_groups=4 --set chunk_size=5
"$here/llamacpp_reference.py" "$here/mamba2_groups4"
# Zamba2: not in transformers 4.47.1; our float64 port of upstream's modeling_zamba2.py.
for case in zamba2 zamba2_blocks2_groups2 zamba2_nope_gqa; do
  rm -rf "$here/$case"
  /usr/bin/python3 "$here/../zamba2_reference.py" --out "$here/$case" --case "$case"
done
# Granite-4.0-H: not in transformers 4.47.1; ../shared/hf_reference/make_hf_folder.py's folder
# with llama.cpp c9ced49's logits (agreeing with its float64 port of upstream to 7.9e-7), copied
# as it is from golden_2025_hybrids/.
rm -rf "$here/granitemoehybrid"
cp -r "$ref/golden_2025_hybrids/granitemoehybrid" "$here/granitemoehybrid"
# Bamba: the same folder set, its reference the float64 port's (llama.cpp c9ced49 rotates the
# wrong pairs of Bamba's partial rotary positions); llama.cpp's own logits left out.
rm -rf "$here/bamba"
cp -r "$ref/golden_2025_hybrids/bamba" "$here/bamba"
rm "$here/bamba/llamacpp_logits_all.npy"
# Falcon-H1 and Nemotron-H (a dense one, 'M-M*-M*-', and a MoE one, 'MEM*EME*'): the same folder
# set, llama.cpp c9ced49's logits (agreeing with the shared float64 port to 3.0e-7, 7.5e-7 and
# 4.1e-6), copied as they are; tests/golden/hybrid_reference.py checks them against attnserve's
# own port of the upstream files.
for case in falcon_h1 nemotron_h nemotron_h_moe; do
  rm -rf "$here/$case"
  cp -r "$ref/golden_2025_hybrids/$case" "$here/$case"
done
# LFM2: not in transformers 4.47.1. attnserve's own float64 port of modeling_lfm2.py writes the
# folders; for `lfm2` llama.cpp c9ced49's logits, which agree with the port to 7.9e-7, become the
# reference. ../shared/peers/llamacpp.sh lists the model types it converts and LFM2 is not among
# them, though llama.cpp's converter has it: a copy of the script with lfm2 added is used.
# `lfm2_conv_bias_untied` keeps the port's reference: llama.cpp's converter takes no conv biases
# (no released LFM2 has them).
for case in lfm2 lfm2_conv_bias_untied; do
  rm -rf "$here/$case"
  /usr/bin/python3 "$here/../lfm2_reference.py" --out "$here/$case" --case "$case"
done
work="$(mktemp -d)"
sed -e "s|^HERE=.*|HERE=$(cd "$ref/../peers" && pwd)|" \
    -e 's|    "nemotron_h": ("NemotronHForCausalLM", "NemotronHModel"),|&\n    "lfm2": ("Lfm2ForCausalLM", "LFM2Model"),|' \
    "$ref/../peers/llamacpp.sh" > "$work/llamacpp.sh"
bash "$work/llamacpp.sh" convert "$here/lfm2" "$work/lfm2.gguf" f32
bash "$work/llamacpp.sh" logits "$work/lfm2.gguf" "$here/lfm2/reference.json" "$work/prompt.npy" \
  --gen 8 --gen-logits "$work/steps.npy"
/usr/bin/python3 "$here/../lfm2_reference.py" --adopt "$here/lfm2" "$work/prompt.npy" "$work/steps.npy"
rm -rf "$work"
# Falcon-H1 with tied embeddings: llama.cpp c9ced49 scales its lm_head by the embedding
# multiplier (10.3 of max |logit| off); the folder's reference is attnserve's own port's,
# llama.cpp's logits kept as llamacpp_*.npy.
rm -rf "$here/falcon_h1_tied"
/usr/bin/python3 "$ref/make_hf_folder.py" --arch falcon_h1 --out "$here/falcon_h1_tied" --seed 1 \
  --set tie_word_embeddings=true
rm "$here/falcon_h1_tied/float64_port_logits_all.npy"
/usr/bin/python3 "$here/../falcon_nemotron_reference.py" --rewrite "$here/falcon_h1_tied"
