"""Median of x4-run --json runs (one JSON object per line on stdin)."""
import json
import statistics
import sys

rows = [json.loads(line) for line in sys.stdin if line.startswith("{")]
if not rows:
    sys.exit("cpu_summary.py: no x4-run --json output on stdin")


def med(key):
    return statistics.median(r[key] for r in rows)


r = rows[0]
print("model\t%s\tfingerprint\t%s\tcommit\t%s\tthreads\t%s" %
      (r["model"], r["model_fingerprint"], r["commit"], r["threads"]))
print("prompt_tokens\t%d\tgenerated_tokens\t%d\truns\t%d" %
      (r["prompt_tokens"], r["generated_tokens"], len(rows)))
print("prefill_tok_s\t%.1f\t(runs %s)" % (med("prefill_tok_s"),
                                         [round(x["prefill_tok_s"], 1) for x in rows]))
print("first_step_ms\t%.2f" % med("first_step_ms"))
print("decode_tok_s\t%.2f\t(median step %.2f ms; runs %s)" %
      (med("decode_tok_s"), med("decode_median_step_ms"),
       [round(x["decode_tok_s"], 2) for x in rows]))
