"""llama.cpp's own tokenization of a text under a GGUF's embedded vocabulary: the reference for
sinkscope's GGUF tokenizers (its pre-tokenizers are the `tokenizers` crate's pipelines written
after llama.cpp's `llama-vocab.cpp`; this runs llama.cpp's C++ regex splitter itself).

    LLAMA_CPP_LIB_PATH=$CACHE/build/bin $CACHE/venv/bin/python tokenize.py \
        --model M.gguf --text text.txt --out ids.json

Writes the token ids (with BOS where the vocabulary adds it) as one JSON list.
"""

import argparse
import json
import os
import sys
import tempfile


def fail(msg):
    print(f"tokenize.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import llama_cpp as L

    with open(a.text, encoding="utf-8") as f:
        text = f.read().encode("utf-8")
    quiet = L.llama_log_callback(lambda level, text, user: None)
    L.llama_log_set(quiet, None)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        fail(f"{a.model}: llama.cpp cannot load it")
    vocab = L.llama_model_get_vocab(model)
    room = len(text) + 16
    buf = (L.llama_token * room)()
    n = L.llama_tokenize(vocab, text, len(text), buf, room, True, False)
    if n < 0:
        fail(f"{a.text}: more than {room} tokens")
    d = os.path.dirname(os.path.abspath(a.out))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tokenize.")
    with os.fdopen(fd, "w") as f:
        json.dump([int(buf[i]) for i in range(n)], f)
    os.replace(tmp, a.out)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
