"""serve_bench.py - one streamed completion through x4-serve with the stock
openai client, timed from the client's side.  bench/serve.sh runs it.

  serve_bench.py BASE_URL MODEL PROMPT_FILE MAX_TOKENS [chat]

With `chat` the prompt file's text is one user message of a streamed chat
completion; without, the prompt of a streamed completion.

Prints one JSON object: the time to the first token (the request's send to
the first SSE event that carries a token), the decode rate over the events
after it and the steady rate (one over the median gap between events after
the first decode step), the event and usage counts, and the text.
"""
import json
import sys
import time

import openai


def main():
    base, model, prompt_file, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    prompt = open(prompt_file).read()
    cl = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
    t0 = time.perf_counter()
    stamps, parts, usage, fin = [], [], None, None
    chat = len(sys.argv) > 5 and sys.argv[5] == "chat"
    common = dict(model=model, max_tokens=n, temperature=0, stream=True,
                  stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    if chat:
        stream = cl.chat.completions.create(messages=[{"role": "user", "content": prompt}],
                                            **common)
    else:
        stream = cl.completions.create(prompt=prompt, **common)
    for ch in stream:
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            piece = c.delta.content if chat else c.text
            fin = c.finish_reason or fin
            if not piece and (c.finish_reason or chat):
                continue  # the role's opening event and the closing one carry no token
            stamps.append(time.perf_counter())
            parts.append(piece or "")
    out = {"events": len(stamps), "finish_reason": fin, "text": "".join(parts),
           "prompt_tokens": usage.prompt_tokens if usage else None,
           "completion_tokens": usage.completion_tokens if usage else None,
           "ttft_s": stamps[0] - t0 if stamps else None,
           "decode_tok_s": (len(stamps) - 1) / (stamps[-1] - stamps[0])
           if len(stamps) > 1 and stamps[-1] > stamps[0] else None}
    # The steady rate as x4-run states it: one over the median gap between
    # events after the first decode step (the first gap is the first step).
    gaps = sorted(b - a for a, b in zip(stamps[1:], stamps[2:]))
    out["steady_tok_s"] = 1 / gaps[len(gaps) // 2] if gaps and gaps[len(gaps) // 2] > 0 else None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
