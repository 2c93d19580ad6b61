"""The inputs of the bad-input cases (scripts/bad-inputs/cases.txt): every `@name` a case names is
the file or directory `name` in WORK, made here. Used by table.sh and tests/bad_inputs.rs.

    python3 make_inputs.py SHARED RUN_FIXTURE WORK        every input
    python3 make_inputs.py --runs WORK RUN_FIXTURE         only the edited runs (ppl, alpha, trunc, needle, quant, kl), afresh

The runs of other models (`other`, `held`) are made by the binary under test itself: each build
writes its own records.
"""
import json
import os
import shutil
import struct
import sys


def patch_gguf(src, dst, key, fmt, value):
    """The GGUF `src` with metadata `key`'s value (after its 4-byte type tag) replaced."""
    b = bytearray(open(src, "rb").read())
    at = b.index(key.encode()) + len(key) + 4
    b[at:at + struct.calcsize("<" + fmt)] = struct.pack("<" + fmt, value)
    open(dst, "wb").write(b)


def overflowing_llama2c(src, dst):
    """A llama2.c checkpoint whose first embedding row is 3e38 everywhere: finite, but its sum of
    squares (every norm's) overflows f32."""
    b = bytearray(open(src, "rb").read())
    dim = struct.unpack("<i", b[:4])[0]
    row = 28 + dim * 4
    b[row:row + 4 * dim] = struct.pack("<f", 3e38) * dim
    open(dst, "wb").write(b)


def edited_runs(work, fixture):
    """Copies of a capture run with one record out of range or cut short, and a needle and a quant
    run with one value out of range."""
    for name in ("ppl", "alpha", "trunc"):
        shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        os.makedirs(os.path.join(work, name))
        for f in ("capture.json", "report.json", "stream.json"):
            shutil.copy(os.path.join(fixture, f), os.path.join(work, name, f))
    for name, edit in (("ppl", lambda r: r["nll"].__setitem__("perplexity", -5.0)),
                       ("alpha", lambda r: r["summary"]["heads"][0]["alpha"].__setitem__(0, 7.5))):
        path = os.path.join(work, name, "capture.json")
        record = json.load(open(path))
        edit(record)
        json.dump(record, open(path, "w"))
    for name, record, edit in (("needle", "needle.json", lambda r: r["cells"][0].__setitem__("rank_accuracy", 1.5)),
                               ("quant", "quant.json", lambda r: r["baseline"].__setitem__("ppl", 0.5))):
        shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        os.makedirs(os.path.join(work, name))
        # The fuzzers' seeds of these records (tests/fixtures/fuzz/).
        r = json.load(open(os.path.join(fixture, "..", "fuzz", record)))
        edit(r)
        json.dump(r, open(os.path.join(work, name, record), "w"))
    # A stream.json of `stream --kl` whose one head's sink mass is out of range.
    shutil.rmtree(os.path.join(work, "kl"), ignore_errors=True)
    os.makedirs(os.path.join(work, "kl"))
    r = json.load(open(os.path.join(fixture, "stream.json")))
    head = {"layer": 0, "head": 0, "kv_head": 0, "sink_mass_exact": 0.5, "sink_mass_rounded": 1.5,
            "key_error_sinks": 0.1, "key_error_rest": 0.1, "value_error_sinks": 0.1, "value_error_rest": 0.1}
    r["cache_error_by_head"] = {"sink_positions": 4, "queries": 10, "heads": [head]}
    json.dump(r, open(os.path.join(work, "kl", "stream.json"), "w"))
    report = os.path.join(work, "trunc", "report.json")
    text = open(report, "rb").read()
    open(report, "wb").write(text[: len(text) // 2])


def main():
    if sys.argv[1] == "--runs":
        edited_runs(sys.argv[2], sys.argv[3])
        return
    shared, fixture, work = sys.argv[1:4]
    models, corpora = os.path.join(shared, "models"), os.path.join(shared, "corpora")
    gguf = os.path.join(models, "stories260K.gguf")
    patch_gguf(gguf, os.path.join(work, "eps.gguf"), "llama.attention.layer_norm_rms_epsilon", "f", float("inf"))
    patch_gguf(gguf, os.path.join(work, "epsneg.gguf"), "llama.attention.layer_norm_rms_epsilon", "f", -1.0)
    patch_gguf(gguf, os.path.join(work, "bos.gguf"), "tokenizer.ggml.bos_token_id", "I", 100000)
    patch_gguf(gguf, os.path.join(work, "kv0.gguf"), "llama.attention.head_count_kv", "I", 0)
    for f in ("stories260K.bin", "tok512.bin"):
        shutil.copy(os.path.join(models, f), os.path.join(work, f))
    overflowing_llama2c(os.path.join(models, "stories260K.bin"), os.path.join(work, "big.bin"))
    shutil.copy(os.path.join(corpora, "tinystories_val_subset.txt"), os.path.join(work, "text.txt"))
    # verify's trace: the fixture's stream.json cut to its one request "sink S=1 + 47 recent, W=48".
    trace = json.load(open(os.path.join(fixture, "stream.json")))
    trace["outcomes"] = trace["outcomes"][1:2]
    trace.pop("recommendation", None)
    json.dump(trace, open(os.path.join(work, "trace.json"), "w"))
    with open(os.path.join(work, "short.txt"), "w") as f:
        f.write("Once upon a time there was a little girl. She liked to play in the park with her dog.\n")
    with open(os.path.join(work, "blank.txt"), "w") as f:
        f.write("   \n")
    os.makedirs(os.path.join(work, "dir"))
    # press's token-id parts: an id outside stories260K's vocabulary of 512, and no ids at all.
    with open(os.path.join(work, "bigid.json"), "w") as f:
        f.write("[99999]\n")
    with open(os.path.join(work, "emptyids.json"), "w") as f:
        f.write("[]\n")
    open(os.path.join(work, "empty.jsonl"), "w").close()
    with open(os.path.join(work, "negative.jsonl"), "w") as f:
        f.write('{"logprob": -0.5, "cache_len": 4}\n{"logprob": -0.3, "cache_len": -2}\n')
    with open(os.path.join(work, "ragged.csv"), "w") as f:
        f.write("token,logprob\na,-0.1\nb,-0.2,7\nc,-0.3\n")
    with open(os.path.join(work, "chunk.jsonl"), "w") as f:
        f.write('{"id": "c", "choices": [{"delta": {"content": "a"}, "logprobs": {"content": [{"token": "a", "logprob": -0.5}]}}]}\n')
        f.write('{"id": "c", "choices": [{"delta": {"content": " the"}, "logprobs": null}]}\n')
    os.mkfifo(os.path.join(work, "fifo"))
    edited_runs(work, fixture)


if __name__ == "__main__":
    main()
