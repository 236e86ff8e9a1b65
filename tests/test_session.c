/*
 * test_session.c - the generation session on the tiny preset on the CPU:
 * a short request after a long one gives a fresh session's tokens (the
 * shared-cache bug stays impossible), request options change between
 * requests without a reload and come back bit for bit, callbacks stop a
 * request at a token and at a prefill chunk, the logits callback sees a
 * row per position, the prompt is checked against the context first.
 */
#include "x4.h"
#include "t.h"

#include <math.h>

static x4_session *open_tiny(void)
{
	x4_err e = {0};
	x4_paths p;
	x4_session *s = NULL;
	if (x4_paths_resolve("build/models/tiny", NULL, &p, &e) || x4_session_open(&s, &p, &e)) {
		printf("FAIL session.open: %s\n", e.msg);
		exit(1);
	}
	return s;
}

static int gen(x4_session *s, const int32_t *ids, size_t n, long max, const x4_trunk_opts *o,
	       int32_t *out, x4_gen_stats *st)
{
	x4_err e = {0};
	x4_request r = { .ids = ids, .n_ids = n, .max_tokens = max, .ignore_eos = true,
			 .sampler = { .top_p = 1 }, .opts = o };
	int rc = x4_session_generate(s, &r, st, &e);
	if (rc)
		printf("# generate: %s\n", e.msg);
	if (!rc && out)
		memcpy(out, st->tokens, sizeof *out * st->n_gen);
	return rc;
}

struct cb {
	int stop_after, seen_tokens, chunks, rows;
};
static int on_token(void *ctx, int32_t id, const char *piece, size_t len)
{
	struct cb *c = ctx;
	(void)piece, (void)len;
	if (id >= 0)
		c->seen_tokens++;
	return c->stop_after && c->seen_tokens >= c->stop_after;
}
static int on_prefill(void *ctx, size_t done, size_t total)
{
	struct cb *c = ctx;
	(void)total;
	c->chunks++;
	return c->stop_after < 0 && done > 0;
}
static int on_logits(void *ctx, const float *rows, int n, x4_err *e)
{
	struct cb *c = ctx;
	(void)e;
	c->rows += n;
	return isfinite(rows[0]) ? 0 : 1;
}

int main(void)
{
	int32_t longp[300], shortp[5] = { 1, 700, 800, 900, 1000 };
	for (int i = 0; i < 300; i++)
		longp[i] = 1000 + (i * 37) % 20000;
	int32_t a[16], b[16], c[16];
	x4_gen_stats st;
	x4_trunk_opts o;
	x4_trunk_opts_default(&o);
	o.threads = 2;

	x4_session *fresh = open_tiny();
	int rc = gen(fresh, shortp, 5, 16, &o, a, &st);
	T_OK(rc == 0 && st.n_gen == 16, "session.short_fresh", "rc %d, %zu tokens", rc, st.n_gen);
	x4_session_close(fresh);

	x4_session *s = open_tiny();
	gen(s, longp, 300, 16, &o, NULL, &st);
	rc = gen(s, shortp, 5, 16, &o, b, &st);
	T_OK(rc == 0 && !memcmp(a, b, sizeof a), "session.short_after_long_is_fresh",
	     "a short request after a long one gave other tokens (a shared cache?)");

	/* Options between requests: a narrow residual, then back: bit for bit. */
	x4_trunk_opts n = o;
	n.resid = X4_RESID_BF16;
	n.max_ctx = 64;
	rc = gen(s, shortp, 5, 16, &n, NULL, &st);
	T_OK(rc == 0 && x4_trunk_get_opts(x4_session_trunk(s))->resid == X4_RESID_BF16,
	     "session.options_change", "rc %d", rc);
	rc = gen(s, shortp, 5, 16, &o, c, &st);
	T_OK(rc == 0 && !memcmp(a, c, sizeof a), "session.options_return", "other tokens after "
	     "the options came back");

	/* A load option cannot change without a reload. */
	x4_err e = {0};
	x4_trunk_opts d = o;
	d.device = 0;
	x4_request r = { .ids = shortp, .n_ids = 5, .max_tokens = 4, .sampler = { .top_p = 1 },
			 .opts = &d };
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == X4_EINVAL && strstr(e.msg, "reloaded"), "session.load_option_refused",
	     "rc %d: %s", rc, e.msg);

	/* Callbacks: stop at the 3rd token; rows for every position. */
	struct cb cb = { .stop_after = 3 };
	r = (x4_request){ .ids = shortp, .n_ids = 5, .max_tokens = 10, .ignore_eos = true,
			  .sampler = { .top_p = 1 }, .opts = &o, .on_token = on_token,
			  .on_prefill = on_prefill, .on_logits = on_logits, .ctx = &cb };
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == 0 && st.stop == X4_STOP_CANCEL && st.n_gen == 3 && cb.seen_tokens == 3,
	     "session.cancel_at_token", "rc %d stop %s, %zu tokens", rc, x4_stop_name(st.stop),
	     st.n_gen);
	T_OK(cb.rows == 5 + 2, "session.logits_rows", "%d rows for a 5-token prompt and 3 tokens "
	     "stopped (want 7: the stopped token has none)", cb.rows);
	cb = (struct cb){ .stop_after = 0 };
	r.max_tokens = 4;
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == 0 && cb.rows == 5 + 4 && st.stop == X4_STOP_COUNT, "session.logits_rows_full",
	     "%d rows (want 9)", cb.rows);
	/* Stop in the prefill: at the first chunk boundary of a 300-token prompt. */
	cb = (struct cb){ .stop_after = -1 };
	r.ids = longp;
	r.n_ids = 300;
	r.on_logits = NULL;
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == 0 && st.stop == X4_STOP_CANCEL && st.n_gen == 0 && cb.chunks == 1 &&
	     st.n_prefilled < 300, "session.cancel_in_prefill", "rc %d, stop %s, %d chunks, %zu "
	     "prefilled", rc, x4_stop_name(st.stop), cb.chunks, st.n_prefilled);
	T_OK(isfinite(st.prefill_tok_s) && st.prefill_tok_s == st.n_prefilled / st.prefill_s,
	     "session.prefill_rate_of_what_ran", "%g tok/s for %zu positions in %g s",
	     st.prefill_tok_s, st.n_prefilled, st.prefill_s);

	/* A prompt longer than the cache: a context error before any work. */
	x4_trunk_opts small = o;
	small.max_ctx = 100;
	r = (x4_request){ .ids = longp, .n_ids = 300, .max_tokens = 1, .sampler = { .top_p = 1 },
			  .opts = &small };
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == X4_ERANGE && strstr(e.msg, "300 tokens") && strstr(e.msg, "100 positions"),
	     "session.prompt_checked_first", "rc %d: %s", rc, e.msg);
	/* Text and chat prompts tokenize as the tokenizer does. */
	r = (x4_request){ .text = "Hello there", .text_len = 11, .max_tokens = 2,
			  .sampler = { .top_p = 1 }, .opts = &o };
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == 0 && st.n_prompt > 0 && st.n_gen <= 2, "session.text_prompt", "rc %d", rc);
	x4_chat_msg m[1] = { { "user", "Hi" } };
	r = (x4_request){ .chat = m, .n_chat = 1, .max_tokens = 2, .sampler = { .top_p = 1 },
			  .opts = &o };
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == 0 && st.n_prompt > 3, "session.chat_prompt", "rc %d, %zu ids", rc, st.n_prompt);
	r = (x4_request){ .text = "", .max_tokens = 2, .sampler = { .top_p = 1 } };
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == X4_EINVAL, "session.empty_prompt_refused", "rc %d", rc);
	x4_session_close(s);
	return t_done();
}
