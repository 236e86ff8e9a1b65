/*
 * test_session.c - the generation session on the tiny preset on the CPU:
 * a short request after a long one gives a fresh session's tokens (the
 * shared-cache bug stays impossible), request options change between
 * requests without a reload and come back bit for bit, callbacks stop a
 * request at a token and at a prefill chunk, the logits callback sees a
 * row per position, the prompt is checked against the context first.
 * The prefix store (lib/prefix.c): the cache's rows read and restored in
 * every CPU arithmetic, a hit that gives a fresh run's tokens and logits
 * bit for bit, the shared-cache bug through the store, LRU eviction under
 * the budget, incompatible options, the counters, and what a chat's
 * second turn reuses.
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

/* Every row the logits callback is given, appended. */
struct rows {
	float *v;
	int n, cap, nv;
	size_t first_reused; /* st->n_reused as the first callback saw it */
	const x4_gen_stats *st;
	bool seen;
};
static int keep_rows(void *ctx, const float *rows, int n, x4_err *e)
{
	struct rows *r = ctx;
	if (!r->seen && r->st)
		r->first_reused = r->st->n_reused;
	r->seen = true;
	if (r->n + n > r->cap)
		return x4_err_set(e, X4_ENOMEM, "test: more than %d rows", r->cap);
	memcpy(r->v + (size_t)r->n * r->nv, rows, sizeof(float) * (size_t)n * r->nv);
	r->n += n;
	return 0;
}

/* A greedy request through the store ps (may be NULL); rows (may be NULL)
 * receives every logits row the request gives. */
static int gen_ps(x4_session *s, x4_prefix_store *ps, const int32_t *ids, size_t n, long max,
		  const x4_trunk_opts *o, int32_t *out, struct rows *rows, x4_gen_stats *st)
{
	x4_err e = {0};
	if (rows) {
		rows->n = 0;
		rows->seen = false;
		rows->st = st;
	}
	x4_request r = { .ids = ids, .n_ids = n, .max_tokens = max, .ignore_eos = true,
			 .sampler = { .top_p = 1 }, .opts = o, .prefix = ps,
			 .on_logits = rows ? keep_rows : NULL, .ctx = rows };
	int rc = x4_session_generate(s, &r, st, &e);
	if (rc)
		printf("# generate: %s\n", e.msg);
	if (!rc && out)
		memcpy(out, st->tokens, sizeof *out * st->n_gen);
	return rc;
}

static int gen(x4_session *s, const int32_t *ids, size_t n, long max, const x4_trunk_opts *o,
	       int32_t *out, x4_gen_stats *st)
{
	return gen_ps(s, NULL, ids, n, max, o, out, NULL, st);
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

/* ---- the prefix store ---- */

/* Rows read from one trunk and restored into another with other max_ctx,
 * chunk and threads: the continuation's logits are the first trunk's, bit
 * for bit, in each CPU arithmetic and residual variant; and the range
 * errors. */
static void cache_round_trip(const x4_model *m, const int32_t *p, int n)
{
	const x4_config *c = x4_model_config(m);
	struct { const char *name; int prec, kv, resid, sub; } v[] = {
		{ "f32", X4_PREC_F32, X4_KV_DEFAULT, X4_RESID_F32, X4_SUB_F32 },
		{ "f32_exact", X4_PREC_F32, X4_KV_EXACT, X4_RESID_F32, X4_SUB_F32 },
		{ "f64", X4_PREC_F64, X4_KV_DEFAULT, X4_RESID_F32, X4_SUB_F32 },
		{ "f64_kv16", X4_PREC_F64, X4_KV_F16, X4_RESID_F32, X4_SUB_F32 },
		{ "resid_bf16", X4_PREC_F32, X4_KV_DEFAULT, X4_RESID_BF16, X4_SUB_F32 },
		{ "resid_f16", X4_PREC_F32, X4_KV_DEFAULT, X4_RESID_F16, X4_SUB_F32 },
		{ "sub_bf16", X4_PREC_F32, X4_KV_DEFAULT, X4_RESID_F32, X4_SUB_BF16 },
	};
	size_t nv = (size_t)c->n_vocab, cw = (size_t)(c->kv_lora + c->d_rope);
	int k = n * 3 / 4;
	float *la = malloc(sizeof(float) * nv * (size_t)n), *lb = malloc(sizeof(float) * nv * (size_t)n);
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		x4_err e = {0};
		x4_trunk_opts oa, ob;
		x4_trunk_opts_default(&oa);
		oa.prec = v[i].prec;
		oa.kv = v[i].kv;
		oa.resid = v[i].resid;
		oa.sublayer = v[i].sub;
		oa.threads = 2;
		oa.max_ctx = 256;
		ob = oa;
		ob.threads = 1;
		ob.max_ctx = 100;
		ob.prefill_chunk = 7;
		x4_trunk *ta = NULL, *tb = NULL;
		int rc = x4_trunk_create(&ta, m, &oa, &e);
		if (!rc)
			rc = x4_trunk_create(&tb, m, &ob, &e);
		uint64_t rb = rc ? 0 : x4_trunk_cache_row_bytes(ta);
		size_t elem = v[i].prec == X4_PREC_F64 ? 8 : 4;
		char *rows = malloc((size_t)(rb ? rb : 1) * (size_t)n), *back = malloc((size_t)(rb ? rb : 1) * (size_t)n);
		if (!rc)
			rc = x4_trunk_forward(ta, p, n, la, true, &e);
		if (!rc)
			rc = x4_trunk_cache_read(ta, k, rows, &e);
		/* tb has run something else first: the restore replaces it. */
		if (!rc)
			rc = x4_trunk_forward(tb, p + 5, 20, NULL, false, &e);
		if (!rc)
			rc = x4_trunk_cache_restore(tb, k, rows, &e);
		int pos = tb ? x4_trunk_pos(tb) : -1;
		if (!rc)
			rc = x4_trunk_forward(tb, p + k, n - k, lb, true, &e);
		if (!rc)
			rc = x4_trunk_cache_read(tb, k, back, &e);
		bool same = !rc && !memcmp(la + (size_t)k * nv, lb, sizeof(float) * nv * (size_t)(n - k));
		char name[96];
		snprintf(name, sizeof name, "session.prefix.cache_round_trip_%s", v[i].name);
		T_OK(!rc && rb == (uint64_t)c->n_block * cw * elem && pos == k && same &&
		     !memcmp(rows, back, (size_t)rb * (size_t)k), name,
		     "rc %d (%s), row bytes %llu, pos %d after restoring %d, continuation %s",
		     rc, e.msg, (unsigned long long)rb, pos, k, same ? "equal" : "differs");
		x4_trunk_free(ta);
		x4_trunk_free(tb);
		free(rows);
		free(back);
	}
	free(la);
	free(lb);

	/* The range errors, named, and a restore of 0 that is a reset. */
	x4_err e = {0};
	x4_trunk_opts o;
	x4_trunk_opts_default(&o);
	o.threads = 2;
	o.max_ctx = 64;
	x4_trunk *t = NULL;
	if (x4_trunk_create(&t, m, &o, &e)) {
		T_OK(0, "session.prefix.cache_range_errors", "create: %s", e.msg);
		return;
	}
	char *rows = malloc((size_t)x4_trunk_cache_row_bytes(t) * 65);
	int rc0 = x4_trunk_forward(t, p, 10, NULL, false, &e);
	int r1 = x4_trunk_cache_read(t, 11, rows, &e);
	bool m1 = strstr(e.msg, "10 positions") != NULL;
	int r2 = x4_trunk_cache_read(t, -1, rows, &e);
	int r3 = x4_trunk_cache_read(t, 5, NULL, &e);
	int r4 = x4_trunk_cache_restore(t, 65, rows, &e);
	bool m4 = strstr(e.msg, "64 positions") != NULL;
	int r5 = x4_trunk_cache_restore(t, -2, rows, &e);
	int r6 = x4_trunk_cache_restore(t, 3, NULL, &e);
	int pos_kept = x4_trunk_pos(t); /* refused before any work */
	int r7 = x4_trunk_cache_restore(t, 0, rows, &e);
	T_OK(!rc0 && r1 == X4_ERANGE && m1 && r2 == X4_EINVAL && r3 == X4_EINVAL &&
	     r4 == X4_ERANGE && m4 && r5 == X4_EINVAL && r6 == X4_EINVAL && pos_kept == 10 &&
	     r7 == 0 && x4_trunk_pos(t) == 0, "session.prefix.cache_range_errors",
	     "read 11 of 10: %d, -1: %d, NULL: %d; restore 65 of 64: %d, -2: %d, NULL: %d; pos "
	     "%d then %d after restoring 0 (last message: %s)", r1, r2, r3, r4, r5, r6, pos_kept,
	     x4_trunk_pos(t), e.msg);
	free(rows);
	x4_trunk_free(t);
}

/* A request through the store gives what a fresh session gives: the same
 * greedy tokens, and the forwarded positions' logits bit for bit (the CPU
 * computes a token the same in any chunk and restores exactly its rows). */
static void store_hits(const x4_trunk_opts *o)
{
	x4_err e = {0};
	x4_session *s = open_tiny(), *fresh = open_tiny();
	const x4_config *c = x4_model_config(x4_session_model(s));
	int nv = c->n_vocab;
	enum { NP = 40, NG = 8 };
	int32_t p[NP], other[NP];
	for (int i = 0; i < NP; i++) {
		p[i] = 500 + (i * 53) % 9000;
		other[i] = 9000 + (i * 31) % 9000;
	}
	struct rows fr = { .v = malloc(sizeof(float) * (size_t)nv * 400), .cap = 400, .nv = nv };
	struct rows pr = { .v = malloc(sizeof(float) * (size_t)nv * 400), .cap = 400, .nv = nv };
	int32_t ta[NG], tb[NG];
	x4_gen_stats st, sf;
	x4_prefix_store *ps = NULL;
	if (x4_prefix_store_create(&ps, (uint64_t)1 << 30, &e)) {
		T_OK(0, "session.prefix.create", "%s", e.msg);
		return;
	}
	x4_prefix_stats ps0;
	x4_prefix_store_stats(ps, &ps0);
	T_OK(ps0.entries == 0 && ps0.bytes == 0 && ps0.budget == (uint64_t)1 << 30 && !ps0.hits &&
	     !ps0.misses, "session.prefix.create", "a new store: %llu entries, %llu bytes",
	     (unsigned long long)ps0.entries, (unsigned long long)ps0.bytes);

	/* The first request misses and stores the prompt and the 7 generated
	 * tokens it fed (the 8th is not fed without the logits callback). */
	int rc = gen_ps(s, ps, p, NP, NG, o, ta, NULL, &st);
	uint64_t rb = x4_trunk_cache_row_bytes(x4_session_trunk(s));
	x4_prefix_stats a;
	x4_prefix_store_stats(ps, &a);
	T_OK(!rc && st.n_reused == 0 && a.misses == 1 && a.hits == 0 && a.entries == 1 &&
	     a.bytes == (NP + NG - 1) * (rb + 4), "session.prefix.first_request_stores",
	     "rc %d, reused %zu, %llu misses, %llu entries of %llu bytes (want %llu)", rc,
	     st.n_reused, (unsigned long long)a.misses, (unsigned long long)a.entries,
	     (unsigned long long)a.bytes, (unsigned long long)((NP + NG - 1) * (rb + 4)));

	/* The same prompt again: NP - 1 restored, the last forwarded. */
	rc = gen_ps(fresh, NULL, p, NP, NG, o, ta, &fr, &sf);
	int rc2 = gen_ps(s, ps, p, NP, NG, o, tb, &pr, &st);
	x4_prefix_store_stats(ps, &a);
	T_OK(!rc && !rc2 && st.n_reused == NP - 1 && st.n_prefilled == 1 && a.hits == 1 &&
	     a.reused_tokens == NP - 1 && pr.first_reused == NP - 1,
	     "session.prefix.repeat_hits", "reused %zu (want %d), prefilled %zu, %llu hits; the "
	     "callback saw n_reused %zu", st.n_reused, NP - 1, st.n_prefilled,
	     (unsigned long long)a.hits, pr.first_reused);
	T_OK(!rc && !rc2 && !memcmp(ta, tb, sizeof ta), "session.prefix.repeat_same_tokens",
	     "the greedy tokens differ from a fresh session's");
	/* The fresh run's rows: NP prompt rows, then NG; the hit's: 1, then NG. */
	T_OK(!rc && !rc2 && fr.n == NP + NG && pr.n == 1 + NG &&
	     !memcmp(fr.v + (size_t)(NP - 1) * nv, pr.v, sizeof(float) * (size_t)nv * (1 + NG)),
	     "session.prefix.repeat_same_logits_bits", "%d and %d rows, or the logits differ "
	     "(the CPU should give the same bits)", fr.n, pr.n);
	T_OK(isfinite(st.prefill_tok_s) && st.prefill_tok_s == 1 / st.prefill_s &&
	     st.restore_s >= 0 && st.offer_s >= 0, "session.prefix.prefill_rate_counts_forwarded",
	     "%g tok/s in %g s for 1 forwarded position", st.prefill_tok_s, st.prefill_s);
	/* With the callback the last token was fed too: the entry grew to
	 * NP + NG and replaced the shorter one. */
	x4_prefix_store_stats(ps, &a);
	T_OK(a.entries == 1 && a.bytes == (NP + NG) * (rb + 4), "session.prefix.longer_replaces",
	     "%llu entries, %llu bytes", (unsigned long long)a.entries, (unsigned long long)a.bytes);

	/* A prompt that is wholly a stored prefix: all but its last token. */
	rc = gen_ps(fresh, NULL, p, 20, NG, o, ta, NULL, &sf);
	rc2 = gen_ps(s, ps, p, 20, NG, o, tb, NULL, &st);
	T_OK(!rc && !rc2 && st.n_reused == 19 && !memcmp(ta, tb, sizeof ta),
	     "session.prefix.prompt_within_an_entry", "reused %zu (want 19), tokens %s", st.n_reused,
	     memcmp(ta, tb, sizeof ta) ? "differ" : "equal");
	/* Its 7 generated ids branch off p: a second entry.  A prefill-only
	 * request of p's first 30 ids leaves rows an entry holds: none more. */
	x4_prefix_store_stats(ps, &a);
	uint64_t before = a.entries;
	rc = gen_ps(s, ps, p, 30, 0, o, NULL, NULL, &st);
	x4_prefix_store_stats(ps, &a);
	T_OK(!rc && before == 2 && a.entries == 2 && st.n_reused == 29,
	     "session.prefix.no_duplicate_of_a_prefix", "%llu entries, then %llu after a request "
	     "whose rows an entry held (want 2, 2)", (unsigned long long)before,
	     (unsigned long long)a.entries);

	/* The shared-cache bug through the store: a short prompt that shares
	 * its first 3 ids with the long entry gets a fresh session's tokens. */
	int32_t sh[6] = { p[0], p[1], p[2], 7, 8, 9 };
	rc = gen_ps(fresh, NULL, sh, 6, NG, o, ta, NULL, &sf);
	rc2 = gen_ps(s, ps, sh, 6, NG, o, tb, NULL, &st);
	T_OK(!rc && !rc2 && st.n_reused == 3 && !memcmp(ta, tb, sizeof ta),
	     "session.prefix.short_after_long_is_fresh", "reused %zu (want 3), tokens %s",
	     st.n_reused, memcmp(ta, tb, sizeof ta) ? "differ (a shared cache?)" : "equal");
	/* Nothing shared: a miss, and a fresh session's tokens. */
	rc = gen_ps(fresh, NULL, other, NP, NG, o, ta, NULL, &sf);
	rc2 = gen_ps(s, ps, other, NP, NG, o, tb, NULL, &st);
	T_OK(!rc && !rc2 && st.n_reused == 0 && !memcmp(ta, tb, sizeof ta),
	     "session.prefix.unrelated_misses", "reused %zu, tokens %s", st.n_reused,
	     memcmp(ta, tb, sizeof ta) ? "differ" : "equal");
	x4_prefix_store_free(ps);
	x4_session_close(s);
	x4_session_close(fresh);
	free(fr.v);
	free(pr.v);
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
	cache_round_trip(x4_session_model(s), longp, 40);
	x4_session_close(s);
	store_hits(&o);
	return t_done();
}
