#!/usr/bin/env python3
"""oracle_tok.py - x4's tokenizer against the sentencepiece package.

The oracle is sentencepiece itself, loading the tokenizer.model that x4
derives (build/tests/helper_tok write-model).  Written from sentencepiece's
documented behaviour, not from x4's C code.  Checks, printing PASS/FAIL lines:
  - the derived model loads, with Xing4's special ids and types;
  - every line of >= 1 MB of English (tests/get-corpus.sh) encodes to the
    same ids, 100%;
  - hard cases (whitespace, tabs, emoji, CJK, combining marks, invalid UTF-8,
    text spelling special pieces, very long words), line by line and as
    whole files with newlines;
  - X4_TOKENIZE_SPECIAL: control pieces spelled in the text become their ids
    and the text between them is encoded by sentencepiece, the dummy prefix
    only at the start of the input (a copy of the model with
    add_dummy_prefix off encodes the later fragments);
  - decoding: sentencepiece's decode of any ids equals x4's.
Run from the tree's root (tests/run.sh does).
"""
import os
import random
import subprocess
import sys
import tempfile

import sentencepiece as spm

HELPER = "build/tests/helper_tok"
N_VOCAB = 131072      # the full preset's vocabulary
N_SMALL = 32768       # no reserved pieces at all
passed = failed = 0


def check(ok, name, why=""):
    global passed, failed
    if ok:
        passed += 1
        print("PASS", name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))
    sys.stdout.flush()


def helper(*args):
    r = subprocess.run([HELPER] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if r.returncode:
        raise RuntimeError("%s %s: exit %d: %s" % (HELPER, " ".join(map(str, args)),
                                                  r.returncode, r.stderr.decode()))
    return r.stdout.decode()


# ---- a minimal protobuf reader/writer, enough to flip one NormalizerSpec flag ----

def varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def enc_varint(v):
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def fields(b):
    """(number, wire type, raw bytes of the whole field, payload) of a message."""
    i = 0
    while i < len(b):
        start = i
        key, i = varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
            payload = v
        elif wire == 1:
            payload = b[i:i + 8]
            i += 8
        elif wire == 5:
            payload = b[i:i + 4]
            i += 4
        elif wire == 2:
            n, i = varint(b, i)
            payload = b[i:i + n]
            i += n
        else:
            raise ValueError("wire type %d" % wire)
        yield num, wire, b[start:i], payload


def without_dummy_prefix(model):
    """The model with normalizer_spec.add_dummy_prefix (field 3 of field 3) false."""
    out = bytearray()
    for num, wire, raw, payload in fields(model):
        if num == 3 and wire == 2:
            spec = bytearray()
            for n2, w2, raw2, _ in fields(payload):
                if n2 != 3:
                    spec += raw2
            spec += enc_varint(3 << 3 | 0) + enc_varint(0)
            out += enc_varint(3 << 3 | 2) + enc_varint(len(spec)) + spec
        else:
            out += raw
    return bytes(out)


# ---- the checks ----

def encode_lines_x4(lines, mode="encode-lines", n_vocab=N_VOCAB):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(b"\n".join(lines))
        path = f.name
    try:
        out = helper(mode, n_vocab, path).split("\n")
    finally:
        os.unlink(path)
    got = [[int(x) for x in l.split(",")] if l else [] for l in out[:len(lines)]]
    return got


def compare_lines(name, lines, sp, x4=None):
    x4 = x4 if x4 is not None else encode_lines_x4(lines)
    bad = [(i, l) for i, l in enumerate(lines) if sp.encode(l) != x4[i]]
    if bad:
        i, l = bad[0]
        check(False, name, "%d of %d lines differ; first, line %d %r: sentencepiece %s, x4 %s"
              % (len(bad), len(lines), i + 1, l[:60], sp.encode(l)[:20], x4[i][:20]))
    else:
        check(True, name)
    return not bad


HARD = [
    b"", b" ", b"  ", b"   a   b   ", b"a ", b" a", b"\t", b"a\tb", b" \t \t ", b"\x0b\x0c\r",
    b"x" + b" " * 100 + b"y", b" " * 33,
    "\U0001F600\U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467".encode(),
    "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e\u306e\u6587\u7ae0 \ud55c\uad6d\uc5b4".encode(),
    "e\u0301 a\u0308 n\u0303\u0323 \u0915\u094d\u0937".encode(),
    "\u2581 \u2581\u2581x \ufffd \u00a0nbsp \u200b".encode(),
    b"\xff", b"a\xffb", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82x", b"\xed\xa0\x80",
    b"\xc0\x80", b"\xc1\xbf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\x80\x80",
    b"\xf0\x9f\x98", b"ok \xfe\xfe done", b"\x00", b"a\x00b", b"\x01\x02\x7f",
    b"<_end>", b"<_unk>", b"<_bos>", b"<_system>", b"<_user>", b"<_bot>", b"<think>",
    b"</think>", b"<_reserved_32768>", b"<_reserved_131071>", b"[INST]", b"<s>", b"</s>",
    b"[REFERENCE_DOC_3]", b"[REFERENCE_DOC_10]x", b"a[REFERENCE_DOC_1]b",
    b" [REFERENCE_DOC_19] [REFERENCE_DOC_1", b"<0x41> <0xFF>",
    b"<_user>Hi<_bot><think>\\n", b"<_system><_user>What is the capital of France?<_bot><think>",
    b"a" * 5000, b"supercalifragilistic" * 200, b"antidisestablishmentarianism " * 50,
    b"1234567890 3.14159 1e-9 0x1F", b"https://example.com/a?b=c&d=e#f",
    b"CamelCaseIdentifiers_and_snake_case->arrow", b"!!!???...,,,;;;:::",
]

HARD_FILES = [b"a\nb", b"\n", b"\n\n  \n", b"line one\r\nline two\r\n", b" \n \n",
              b"<_end>\n<_end>", "\u00e9\n\u4e2d\n\U0001F600".encode()]


def special_reference(text, sp, sp_np, controls):
    """sentencepiece's encoding of text whose control spellings are matched whole."""
    ids, frag, i, start = [], b"", 0, 0
    while i <= len(text):
        best = None
        if i < len(text):
            for c, cid in controls.get(text[i:i + 1], ()):
                if text.startswith(c, i) and (best is None or len(c) > len(best[0])):
                    best = (c, cid)
        if best is None and i < len(text):
            i += 1
            continue
        frag = text[start:i]
        if frag:
            ids += (sp if start == 0 else sp_np).encode(frag)
        if best:
            ids.append(best[1])
            i += len(best[0])
            start = i
        else:
            break
    return ids


def main():
    if not os.access(HELPER, os.X_OK):
        check(False, "tok_helper", "%s is not built (make tests)" % HELPER)
        return
    tmp = tempfile.mkdtemp(prefix="x4tok.")
    model_path = os.path.join(tmp, "tokenizer.model")
    helper("write-model", N_VOCAB, model_path)
    model = open(model_path, "rb").read()
    sp = spm.SentencePieceProcessor(model_file=model_path)
    sp_np = spm.SentencePieceProcessor(model_proto=without_dummy_prefix(model))

    # The derived model.
    names = ["<_unk>", "<_bos>", "<_end>", "<_system>", "<_user>", "<_bot>", "<think>",
             "</think>"]
    check(sp.vocab_size() == N_VOCAB, "tok_model_size", "vocab_size %d" % sp.vocab_size())
    check([sp.id_to_piece(i) for i in range(8)] == names, "tok_model_low_ids",
          str([sp.id_to_piece(i) for i in range(8)]))
    check((sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2), "tok_model_unk_bos_eos",
          str((sp.unk_id(), sp.bos_id(), sp.eos_id())))
    check(sp.is_unknown(0) and all(sp.is_control(i) for i in range(1, 8)), "tok_model_types",
          "ids 1..7 must be control, 0 unknown")
    check(all(sp.is_unused(i) and sp.id_to_piece(i) == "<_reserved_%d>" % i
              for i in (32768, 40000, N_VOCAB - 1)), "tok_model_reserved",
          "ids >= 32768 must be unused <_reserved_ID>")
    small = os.path.join(tmp, "small.model")
    helper("write-model", N_SMALL, small)
    sps = spm.SentencePieceProcessor(model_file=small)
    check(sps.vocab_size() == N_SMALL, "tok_model_32768", "vocab_size %d" % sps.vocab_size())
    r = subprocess.run([HELPER, "write-model", "32767", os.path.join(tmp, "x")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check(r.returncode != 0 and b"32768" in r.stderr, "tok_model_too_small",
          "n_vocab 32767 must be refused naming 32768: %r" % r.stderr)

    # The corpus.
    r = subprocess.run(["tests/get-corpus.sh"], stderr=subprocess.PIPE)
    if r.returncode:
        check(False, "tok_corpus", r.stderr.decode().strip())
    else:
        text = open("build/corpus/english.txt", "rb").read()
        lines = text.split(b"\n")
        if compare_lines("tok_corpus_encode", lines, sp):
            print("# corpus: %d lines, %d bytes, identical ids" % (len(lines), len(text)))
        check(len(text) >= 1000000, "tok_corpus_size", "%d bytes" % len(text))
        sp.encode(lines[:1000])
        x4s = encode_lines_x4(lines[:2000], n_vocab=N_SMALL)
        check(all(sps.encode(l) == x4s[i] for i, l in enumerate(lines[:2000])),
              "tok_corpus_encode_32768", "the vocabulary without reserved pieces differs")

    # Hard cases, line by line and as whole files.
    compare_lines("tok_hard_lines", HARD, sp)
    bad = []
    for i, t in enumerate(HARD_FILES):
        p = os.path.join(tmp, "f%d" % i)
        open(p, "wb").write(t)
        got = helper("encode-file", N_VOCAB, p).strip()
        got = [int(x) for x in got.split(",")] if got else []
        if got != sp.encode(t):
            bad.append((t, sp.encode(t), got))
    check(not bad, "tok_hard_files", "first: %r" % (bad[:1],))

    # Control pieces matched whole (X4_TOKENIZE_SPECIAL).
    controls = {}
    for i in range(sp.vocab_size()):
        if sp.is_control(i):
            c = sp.id_to_piece(i).encode()
            controls.setdefault(c[:1], []).append((c, i))
    special = [t for t in HARD if t] + [
        b"<_system><_user>What is the capital of France?<_bot></think>Paris.<_end>\n"
        b"<_user>And Japan?<_bot><think>\n".replace(b"\n", b"\\n"),
        b"Hello<_end>", b"<_end>Hello", b" <_user> x <_bot>", b"<_end><_end>", b"<_en", b"[INST] hi [/INST]",
        b"<_reserved_33000>", b"x</think>y<think>z"]
    x4sp = encode_lines_x4(special, "encode-special")
    bad = [(t, special_reference(t, sp, sp_np, controls), x4sp[i])
           for i, t in enumerate(special) if special_reference(t, sp, sp_np, controls) != x4sp[i]]
    check(not bad, "tok_special_whole", "%d differ; first %r" % (len(bad), bad[:1]))
    check(encode_lines_x4([b"<_end>"], "encode-special")[0] == [2], "tok_special_end_is_2",
          "with X4_TOKENIZE_SPECIAL <_end> must be id 2")
    check(2 not in encode_lines_x4([b"<_end>"])[0], "tok_plain_end_not_2",
          "without X4_TOKENIZE_SPECIAL <_end> must be text")

    # Decoding: corpus encodings, and random ids of every type.
    rng = random.Random(1)
    seqs = [sp.encode(l) for l in (lines[:3000] if r.returncode == 0 else [])]
    seqs += [sp.encode(t) for t in HARD]
    byte_ids = [i for i in range(sp.vocab_size()) if sp.is_byte(i) and sp.id_to_piece(i) != "<0x00>"]
    pool = list(range(8)) + byte_ids + list(range(740, 780)) + list(range(1027, 1100)) + \
        [32767, 32768, N_VOCAB - 1] + [rng.randrange(1027, 32768) for _ in range(200)]
    for _ in range(2000):
        seqs.append([rng.choice(pool) for _ in range(rng.randrange(0, 12))])
    # Byte runs: valid and broken UTF-8, cut by other pieces.
    b = {int(sp.id_to_piece(i)[3:5], 16): i for i in byte_ids}
    for s in (b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xc3\xa9", b"\xe2\x82", b"\xc3A", b"\xed\xa0\x80",
              b"\xf4\x90\x80\x80", b"\xc0\x80", b"\xff\xfe", b"\xe2\x82\xe2\x82\xac"):
        ids = [b[c] for c in s]
        seqs += [ids, [1] + ids + [1], ids[:1] + [2] + ids[1:], ids + [sp.piece_to_id("\u2581a")]]
    # x4_detokenize returns a C string: a NUL from <0x00> would end it early.
    nul = sp.piece_to_id("<0x00>")
    seqs = [s for s in seqs if nul not in s]
    x4_lines = [",".join(map(str, s)) for s in seqs]
    p = os.path.join(tmp, "ids")
    open(p, "w").write("\n".join(x4_lines))
    got = helper("decode-lines", N_VOCAB, p).split("\n")
    bad = [(s, sp.decode(s), bytes.fromhex(got[i]).decode("utf-8", "replace"))
           for i, s in enumerate(seqs) if sp.decode(s).encode().hex() != got[i]]
    check(not bad, "tok_decode", "%d of %d differ; first %r" % (len(bad), len(seqs), bad[:1]))
    print("# decode: %d id sequences" % len(seqs))


if __name__ == "__main__":
    try:
        main()
    except Exception as ex:  # a crash is a failure with its reason
        check(False, "tok_oracle", repr(ex))
    print("# %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
