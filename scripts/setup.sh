#!/usr/bin/env bash
# From a fresh clone to a runnable model: installs the Debian packages, builds gemlite,
# and converts Karpathy's stories260K (llama2.c checkpoint + tokenizer) into a packed
# checkpoint at build/stories260K. It takes the files from ../shared/models when present,
# and otherwise downloads Karpathy's published copies (the project ships no weights).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh

model_dir=build/downloads/stories260K
shared=../shared/models/stories260K
mkdir -p "$model_dir"
for file in stories260K.bin tok512.model; do
  [ -s "$model_dir/$file" ] && continue
  if [ -s "$shared/$file" ]; then
    cp "$shared/$file" "$model_dir/$file"
  else
    url="https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/$file"
    echo "downloading $url"
    curl -fL --retry 3 -o "$model_dir/$file.part" "$url" && mv "$model_dir/$file.part" "$model_dir/$file"
  fi
done
build/gemlite-quantize "$model_dir/stories260K.bin" build/stories260K "${FORMAT:-q8}" \
  --tokenizer "$model_dir/tok512.model"
echo "ready: build/gemlite-chat -m build/stories260K -p \"Once upon a time\""
