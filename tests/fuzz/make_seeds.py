#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (tests/fuzz/corpus/<harness>/).

Run from anywhere: python3 tests/fuzz/make_seeds.py. The seeds are small
hand-made inputs that reach each parser's main paths; the fuzzer mutates
from them. Re-running rewrites the same bytes."""
import json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- GGUF ------------------------------------------------------------------
def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == 0: return struct.pack("<B", v)
    if t == 4: return struct.pack("<I", v)
    if t == 5: return struct.pack("<i", v)
    if t == 6: return struct.pack("<f", v)
    if t == 7: return struct.pack("<B", 1 if v else 0)
    if t == 8: return gstr(v)
    if t == 10: return struct.pack("<Q", v)
    if t == 12: return struct.pack("<d", v)
    raise ValueError(t)


def garr(t, vals):
    return struct.pack("<IQ", t, len(vals)) + b"".join(gval(t, v) for v in vals)


def gguf(kvs, tensors=(), version=3, align=32):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t)
        out += garr(*v) if t == 9 else gval(t, v)
    off = 0
    datas = []
    for name, dims, dtype, data in tensors:
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", dtype, off)
        datas.append(data)
        off += (len(data) + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    for d in datas:
        out += d + b"\0" * ((-len(d)) % align)
    return out


F32 = 0
basic = gguf([("general.architecture", 8, "llama"), ("general.name", 8, "seed"),
              ("general.alignment", 4, 32), ("general.file_type", 4, 1),
              ("llama.context_length", 4, 64), ("x.f", 6, 1.5), ("x.b", 7, True), ("x.d", 12, 2.0 ** 63),
              ("x.u64", 10, 2 ** 63), ("x.arr", 9, (5, [1, -2, 3]))],
             [("tok_embd.weight", [4, 2], F32, struct.pack("<8f", *range(8))),
              ("output_norm.weight", [4], F32, struct.pack("<4f", 1, 1, 1, 1))])
put("gguf", "basic.gguf", basic)
put("gguf", "v2.gguf", gguf([("general.architecture", 8, "llama")], version=2))
put("gguf", "truncated.gguf", basic[: len(basic) // 2])
spm_tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(8)] + ["\u2581", "\u2581a", "b", "ab", "\u2581ab"]
spm = gguf([("general.architecture", 8, "llama"), ("tokenizer.ggml.model", 8, "llama"),
            ("tokenizer.ggml.tokens", 9, (8, spm_tokens)),
            ("tokenizer.ggml.scores", 9, (6, [0.0] * 3 + [0.0] * 8 + [-1.0, -2.0, -3.0, -4.0, -5.0])),
            ("tokenizer.ggml.token_type", 9, (5, [2, 3, 3] + [6] * 8 + [1] * 5)),
            ("tokenizer.ggml.bos_token_id", 4, 1), ("tokenizer.ggml.eos_token_id", 4, 2)])
put("gguf", "vocab-spm.gguf", spm)
bpe_tokens = ["a", "b", "c", "\u0120", "ab", "\u0120a", "<|end|>"]
bpe = gguf([("general.architecture", 8, "llama"), ("tokenizer.ggml.model", 8, "gpt2"),
            ("tokenizer.ggml.pre", 8, "llama-bpe"),
            ("tokenizer.ggml.tokens", 9, (8, bpe_tokens)),
            ("tokenizer.ggml.token_type", 9, (5, [1] * 6 + [3])),
            ("tokenizer.ggml.merges", 9, (8, ["a b", "\u0120 a"])),
            ("tokenizer.ggml.eos_token_id", 4, 6)])
put("gguf", "vocab-bpe.gguf", bpe)
put("gguf", "empty", b"")

# ---- Jinja -----------------------------------------------------------------
J = {
    "chatml": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "tools": "{%- if tools %}{% for t in tools %}{{ t | tojson(indent=2) }}{% endfor %}{% endif %}"
             "{%- for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
             "{{ c.function.name }}({{ c.function.arguments | tojson }}){% endfor %}{% endif %}{% endfor %}",
    "macro": "{% macro f(x, y=2) %}[{{ x ~ y }}]{% endmacro %}{{ f(1) }}{{ f(y=3, x='a') }}"
             "{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
    "filters": "{{ messages | map(attribute='role') | unique | list | join(',') }}|{{ 'Ab' | lower | upper }}"
               "|{{ [3,1,2] | sort | reverse | list }}|{{ messages[0].content | trim | length }}"
               "|{{ {'b':1,'a':2} | dictsort }}|{{ 'x' * 3 }}|{{ '%5.2f|%-4s|%03d' % (1.5, 'a', 7) }}",
    "strings": "{{ 'a,b'.split(',') }}{{ ' x '.strip() }}{{ 'abc'[1:] }}{{ 'abc'[::-1] }}"
               "{{ 'Hello'.startswith('He') }}{{ '{}-{}'.format(1, 2) }}{{ 'x'.replace('x', 'y') }}",
    "control": "{% for m in messages if m.role != 'system' %}{% if loop.first %}F{% elif loop.last %}L"
               "{% else %}{{ loop.index }}{% endif %}{% if loop.index > 2 %}{% break %}{% endif %}{% endfor %}"
               "{% raw %}{{ raw }}{% endraw %}{# comment #}{{ raise_exception('x') if false else 'ok' }}",
    "numbers": "{{ n }}{{ i }}{{ n | int }}{{ i - 1 }}{{ 7 // 2 }}{{ 2 ** 10 }}{{ 1e308 * 10 }}{{ (n | float) | round(2) }}"
               "{{ '%d' % n }}{{ '%x' % i }}",
    "json_vars": "{{ messages }}{{ x | tojson }}\0{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}],"
                 " \"x\": {\"a\": [1, 2.5, \"\\u00e9\"]}}",
    "strftime": "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}",
}
for k, v in J.items():
    put("jinja", k + ".jinja", v)

# ---- tokenizers (first byte: vocabulary index and flags) -------------------
T = {
    "spm": (0x00, "Hello world! 12345 caf\u00e9 \U0001F600  \n\ttabs"),
    "llama3": (0x31, "<|begin_of_text|>Hello's world 1234567 \u4f60\u597d  \n\n  x"),
    "qwen2": (0x22, "<|im_start|>user\nI'm fine\u2014don't worry <|im_end|>"),
    "deepseek": (0x13, "def f(x):\n    return x*2 # \u00e9\u00e8"),
    "invalid_utf8": (0x01, b"\xff\xfe\xc3 \xe2\x82 abc \xf0\x9f\x98"),
    "spaces": (0x00, " " * 300),
}
for k, (b, s) in T.items():
    put("tok", k, bytes([b]) + (s.encode() if isinstance(s, str) else s))

# ---- OpenAI request bodies (first byte: endpoint kind) ---------------------
CHAT, COMPL, EMB, TOK, DETOK = 0, 1, 2, 3, 4
O = {
    "chat": (CHAT, {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
                    "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "stream": True,
                    "stream_options": {"include_usage": True}, "stop": ["\n", "END"], "seed": 42,
                    "logprobs": True, "top_logprobs": 3, "logit_bias": {"15": -100}}),
    "chat_parts": (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                    {"type": "text", "text": "b"}]}],
                          "prompt_cache_key": "k1", "frequency_penalty": 0.5, "presence_penalty": -0.5}),
    "completion": (COMPL, {"prompt": "Once upon", "max_tokens": 8, "n": 1, "echo": False, "top_k": 40, "min_p": 0.05}),
    "completion_ids": (COMPL, {"prompt": [1, 2, 3, 32000], "max_tokens": 1}),
    "embedding": (EMB, {"input": ["a", "b", [1, 2]], "encoding_format": "base64"}),
    "tokenize": (TOK, {"content": "hello", "add_special": True, "with_pieces": True}),
    # constrained output: the GBNF parser and the JSON Schema compiler sit
    # behind the request mapping
    "grammar": (COMPL, {"prompt": "x", "grammar": "root ::= item (\",\" item)*\nitem ::= [a-z]+ | \"(\" root \")\"\n"}),
    "json_schema": (CHAT, {"messages": [{"role": "user", "content": "x"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "strict": True, "schema": {
            "type": "object", "properties": {"a": {"type": "integer", "minimum": 0}, "b": {"type": "array",
            "items": {"enum": ["x", "y", 1, None]}, "maxItems": 3}, "c": {"anyOf": [{"type": "string",
            "pattern": "^[a-z]{2,4}$"}, {"type": "number"}]}}, "required": ["a"], "additionalProperties": False}}}}),
    "json_object": (CHAT, {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}),
    "detokenize": (DETOK, {"tokens": [1, 2, 3]}),
}
for k, (b, body) in O.items():
    put("oai", k + ".json", bytes([b]) + json.dumps(body).encode())
# numbers at the edges of their ranges, as reals: the conversion must be
# checked before it happens
put("oai", "seed_2p63.json", bytes([CHAT]) + b'{"messages": [{"role": "user", "content": "x"}], "seed": 9223372036854775808.0}')
put("oai", "huge_numbers.json", bytes([COMPL]) + b'{"prompt": "x", "max_tokens": 1e300, "top_k": -1e19, "temperature": 1e400}')
put("oai", "deep.json", bytes([CHAT]) + b'{"messages": ' + b"[" * 200 + b"]" * 200 + b"}")
put("oai", "bad.json", bytes([CHAT]) + b'{"messages": [{"role": "user", "content": "\\ud800"}], "stop": "x"')
