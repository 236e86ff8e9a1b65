/*
 * test_session.c - the generation session on the tiny preset on the CPU:
 * a short request after a long one gives a fresh session's tokens (the
 * shared-cache bug stays impossible), request options change between
 * requests without a reload and come back bit for bit, callbacks stop a
 * request at a token and at a prefill chunk, the logits callback sees a
 * row per position, the prompt is checked against the context first.
 * The prefix store (lib/run/prefix.c): the cache's rows read and restored in
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
/* The CPU's arithmetic and residual variants: the first is the default;
 * each of the others makes other rows (a key of its own). */
static const struct variant {
	const char *name;
	int prec, kv, resid, sub;
} variants[] = {
	{ "f32", X4_PREC_F32, X4_KV_DEFAULT, X4_RESID_F32, X4_SUB_F32 },
	{ "f32_exact", X4_PREC_F32, X4_KV_EXACT, X4_RESID_F32, X4_SUB_F32 },
	{ "f64", X4_PREC_F64, X4_KV_DEFAULT, X4_RESID_F32, X4_SUB_F32 },
	{ "f64_kv16", X4_PREC_F64, X4_KV_F16, X4_RESID_F32, X4_SUB_F32 },
	{ "resid_bf16", X4_PREC_F32, X4_KV_DEFAULT, X4_RESID_BF16, X4_SUB_F32 },
	{ "resid_f16", X4_PREC_F32, X4_KV_DEFAULT, X4_RESID_F16, X4_SUB_F32 },
	{ "sub_bf16", X4_PREC_F32, X4_KV_DEFAULT, X4_RESID_F32, X4_SUB_BF16 },
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static void apply_variant(x4_trunk_opts *o, const struct variant *v)
{
	o->prec = v->prec;
	o->kv = v->kv;
	o->resid = v->resid;
	o->sublayer = v->sub;
}

static void cache_round_trip(const x4_model *m, const int32_t *p, int n)
{
	const x4_config *c = x4_model_config(m);
	size_t nv = (size_t)c->n_vocab, cw = (size_t)(c->kv_lora + c->d_rope);
	int k = n * 3 / 4;
	float *la = malloc(sizeof(float) * nv * (size_t)n), *lb = malloc(sizeof(float) * nv * (size_t)n);
	for (size_t i = 0; i < N_VARIANTS; i++) {
		const struct variant *v = &variants[i];
		x4_err e = {0};
		x4_trunk_opts oa, ob;
		x4_trunk_opts_default(&oa);
		apply_variant(&oa, v);
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
		size_t elem = v->prec == X4_PREC_F64 ? 8 : 4;
		size_t bytes = (size_t)(rb ? rb : 1) * (size_t)n;
		char *rows = malloc(bytes), *back = malloc(bytes);
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
		snprintf(name, sizeof name, "session.prefix.cache_round_trip_%s", v->name);
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
	/* Its entry took the 3 shared positions from the long entry's rows and
	 * read only the rest from the trunk: restored, a fresh session's tokens. */
	rc2 = gen_ps(s, ps, sh, 6, NG, o, tb, NULL, &st);
	T_OK(!rc && !rc2 && st.n_reused == 5 && !memcmp(ta, tb, sizeof ta),
	     "session.prefix.entry_built_on_an_entry_is_exact", "reused %zu (want 5), tokens %s",
	     st.n_reused, memcmp(ta, tb, sizeof ta) ? "differ" : "equal");
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

static void stats_line(x4_prefix_store *ps, x4_prefix_stats *a)
{
	x4_prefix_store_stats(ps, a);
	printf("# store: %llu hits, %llu misses, %llu reused, %llu entries, %llu of %llu bytes, "
	       "%llu evictions\n", (unsigned long long)a->hits, (unsigned long long)a->misses,
	       (unsigned long long)a->reused_tokens, (unsigned long long)a->entries,
	       (unsigned long long)a->bytes, (unsigned long long)a->budget,
	       (unsigned long long)a->evictions);
}

/* Prefill-only requests of 20 distinct ids each: an entry is exactly
 * 20 * (row_bytes + 4) bytes, and the budget holds two and a half. */
static void store_budget(const x4_trunk_opts *o)
{
	x4_err e = {0};
	x4_session *s = open_tiny();
	enum { N = 20 };
	int32_t q[5][3 * N];
	for (int k = 0; k < 5; k++)
		for (int i = 0; i < 3 * N; i++)
			q[k][i] = 3000 + 1000 * k + (i * 17) % 900;
	x4_gen_stats st;
	int rc = gen(s, q[0], N, 0, o, NULL, &st); /* loads the trunk for its row width */
	uint64_t entry = N * (x4_trunk_cache_row_bytes(x4_session_trunk(s)) + 4);
	uint64_t budget = entry * 5 / 2;
	x4_prefix_store *ps = NULL;
	rc = rc ? rc : x4_prefix_store_create(&ps, budget, &e);
	if (rc) {
		T_OK(0, "session.prefix.budget", "%s", e.msg);
		return;
	}
	x4_prefix_stats a;
	bool within = true;
	size_t reused[8];
	/* A, B, then C evicts A (the least recently used); B is used again,
	 * so D evicts C, not B. */
	int order[] = { 0, 1, 2, 1, 3, 2, 1 };
	for (int i = 0; i < 7 && !rc; i++) {
		rc = gen_ps(s, ps, q[order[i]], N, 0, o, NULL, NULL, &st);
		reused[i] = st.n_reused;
		x4_prefix_store_stats(ps, &a);
		within &= a.bytes <= budget;
	}
	stats_line(ps, &a);
	/* After the 7: A evicted by C, C by D, then C's return evicted B (LRU
	 * then: B used at 3, D at 4, C at 5), B's return D. */
	T_OK(!rc && within && reused[0] == 0 && reused[1] == 0 && reused[2] == 0 &&
	     reused[3] == N - 1 && reused[4] == 0 && reused[5] == 0 && reused[6] == 0 &&
	     a.evictions == 4 && a.entries == 2 && a.bytes == 2 * entry,
	     "session.prefix.lru_eviction", "rc %d, bytes within the budget %s, reused %zu %zu %zu "
	     "%zu %zu %zu %zu (want 0 0 0 19 0 0 0), %llu evictions (want 4), %llu entries",
	     rc, within ? "yes" : "NO", reused[0], reused[1], reused[2], reused[3], reused[4],
	     reused[5], reused[6], (unsigned long long)a.evictions, (unsigned long long)a.entries);
	/* An entry larger than the whole budget is not kept, and evicts nothing. */
	x4_prefix_stats b;
	rc = gen_ps(s, ps, q[4], 3 * N, 0, o, NULL, NULL, &st);
	x4_prefix_store_stats(ps, &b);
	T_OK(!rc && b.entries == a.entries && b.bytes == a.bytes && b.evictions == a.evictions,
	     "session.prefix.too_large_not_kept", "rc %d, %llu entries, %llu bytes, %llu evictions",
	     rc, (unsigned long long)b.entries, (unsigned long long)b.bytes,
	     (unsigned long long)b.evictions);
	T_OK(b.hits == 1 && b.misses == 7 && b.reused_tokens == N - 1 && b.budget == budget,
	     "session.prefix.counters", "%llu hits, %llu misses, %llu reused, budget %llu",
	     (unsigned long long)b.hits, (unsigned long long)b.misses,
	     (unsigned long long)b.reused_tokens, (unsigned long long)b.budget);
	x4_prefix_store_clear(ps);
	x4_prefix_store_stats(ps, &b);
	T_OK(b.entries == 0 && b.bytes == 0 && b.hits == 1, "session.prefix.clear",
	     "%llu entries, %llu bytes, %llu hits kept", (unsigned long long)b.entries,
	     (unsigned long long)b.bytes, (unsigned long long)b.hits);
	x4_prefix_store_free(ps);

	/* Budget 0: a store that keeps nothing, so every request misses. */
	rc = x4_prefix_store_create(&ps, 0, &e);
	for (int i = 0; i < 2 && !rc; i++)
		rc = gen_ps(s, ps, q[0], N, 4, o, NULL, NULL, &st);
	x4_prefix_store_stats(ps, &b);
	T_OK(!rc && b.entries == 0 && b.bytes == 0 && b.misses == 2 && b.hits == 0 &&
	     st.n_reused == 0, "session.prefix.budget_0_keeps_nothing",
	     "rc %d, %llu entries, %llu misses", rc, (unsigned long long)b.entries,
	     (unsigned long long)b.misses);
	x4_prefix_store_free(ps);
	x4_session_close(s);
}

/* Rows made with other values never stand in for a request's own; rows
 * made with another chunk, thread count or cache size do, bit for bit. */
static void store_keys(const x4_trunk_opts *o)
{
	x4_err e = {0};
	x4_session *s = open_tiny(), *fresh = open_tiny();
	enum { N = 40, G = 6 };
	int32_t p[N], a[G], b[G];
	for (int i = 0; i < N; i++)
		p[i] = 700 + (i * 29) % 5000;
	x4_prefix_store *ps = NULL;
	x4_gen_stats st;
	int rc = x4_prefix_store_create(&ps, (uint64_t)1 << 30, &e);
	rc = rc ? rc : gen_ps(s, ps, p, N, 0, o, NULL, NULL, &st);
	/* Every variant but the default (which made the entry). */
	for (size_t i = 1; i < N_VARIANTS && !rc; i++) {
		x4_trunk_opts ob = *o;
		apply_variant(&ob, &variants[i]);
		/* Twice: the second finds the entry the first made with its own key. */
		int rc1 = gen_ps(s, ps, p, N, 0, &ob, NULL, NULL, &st);
		size_t first = st.n_reused;
		rc = rc1 ? rc1 : gen_ps(s, ps, p, N, 0, &ob, NULL, NULL, &st);
		char name[96];
		snprintf(name, sizeof name, "session.prefix.key_%s_not_reused", variants[i].name);
		T_OK(!rc && first == 0 && st.n_reused == N - 1, name, "rc %d, reused %zu the first "
		     "time (want 0), %zu the second (want %d)", rc, first, st.n_reused, N - 1);
	}
	/* The same key with other speed options: reused, and the same tokens. */
	x4_trunk_opts same = *o;
	same.threads = 1;
	same.prefill_chunk = 7;
	same.max_ctx = 512;
	rc = rc ? rc : gen(fresh, p, N, G, o, a, &st);
	rc = rc ? rc : gen_ps(s, ps, p, N, G, &same, b, NULL, &st);
	T_OK(!rc && st.n_reused == N - 1 && !memcmp(a, b, sizeof a),
	     "session.prefix.key_ignores_chunk_threads_ctx", "rc %d, reused %zu, tokens %s", rc,
	     st.n_reused, memcmp(a, b, sizeof a) ? "differ" : "equal");
	x4_prefix_store_free(ps);
	x4_session_close(s);
	x4_session_close(fresh);
}

struct pf {
	size_t first_done, total;
	int calls;
	bool stop;
};
static int pf_cb(void *ctx, size_t done, size_t total)
{
	struct pf *p = ctx;
	if (!p->calls++) {
		p->first_done = done;
		p->total = total;
	}
	return p->stop;
}

/* A request stopped in its prefill offers the chunks it forwarded; the
 * next request of that prompt restores them and counts them as done. */
static void store_cancel(const x4_trunk_opts *o, const int32_t *longp)
{
	x4_err e = {0};
	x4_session *s = open_tiny(), *fresh = open_tiny();
	x4_prefix_store *ps = NULL;
	x4_gen_stats st;
	int32_t a[6], b[6];
	struct pf pf = { .stop = true };
	int rc = x4_prefix_store_create(&ps, (uint64_t)1 << 30, &e);
	x4_request r = { .ids = longp, .n_ids = 300, .max_tokens = 6, .ignore_eos = true,
			 .sampler = { .top_p = 1 }, .opts = o, .prefix = ps,
			 .on_prefill = pf_cb, .ctx = &pf };
	rc = rc ? rc : x4_session_generate(s, &r, &st, &e);
	x4_prefix_stats ss;
	x4_prefix_store_stats(ps, &ss);
	uint64_t rb = x4_trunk_cache_row_bytes(x4_session_trunk(s));
	size_t chunk = st.n_prefilled;
	T_OK(!rc && st.stop == X4_STOP_CANCEL && chunk == 64 && ss.entries == 1 &&
	     ss.bytes == chunk * (rb + 4), "session.prefix.cancel_offers_what_was_forwarded",
	     "rc %d, stop %s, %zu forwarded, %llu entries of %llu bytes", rc, x4_stop_name(st.stop),
	     chunk, (unsigned long long)ss.entries, (unsigned long long)ss.bytes);
	pf = (struct pf){ .stop = false };
	rc = rc ? rc : x4_session_generate(s, &r, &st, &e);
	memcpy(b, st.tokens, sizeof b);
	T_OK(!rc && st.n_reused == chunk && st.n_prefilled == 300 - chunk &&
	     pf.first_done == chunk + 64 && pf.total == 300,
	     "session.prefix.on_prefill_counts_restored", "rc %d, reused %zu, prefilled %zu, the "
	     "first call said %zu of %zu (want %zu of 300)", rc, st.n_reused, st.n_prefilled,
	     pf.first_done, pf.total, chunk + 64);
	rc = rc ? rc : gen(fresh, longp, 300, 6, o, a, &st);
	T_OK(!rc && !memcmp(a, b, sizeof a), "session.prefix.after_cancel_same_tokens",
	     "rc %d, tokens %s", rc, memcmp(a, b, sizeof a) ? "differ" : "equal");
	x4_prefix_store_free(ps);
	x4_session_close(s);
	x4_session_close(fresh);
}

/* What a chat's second turn reuses (docs/serving.md, "The prefix store").
 * The tiny preset's tokenizer is x4's vocabulary (lib/tok/spm.c: Mistral's v3
 * pieces with Xing4's control ids, the released layout), so the marker ids
 * are the release's and only plain text may encode into other pieces. */
static void store_chat(const x4_trunk_opts *o)
{
	x4_err e = {0};
	x4_session *s = open_tiny();
	const x4_tokenizer *tok = x4_model_tokenizer(x4_session_model(s));
	x4_prefix_store *ps = NULL;
	x4_gen_stats st;
	x4_chat_msg t1[] = { { "system", "You are terse." },
			     { "user", "What is the capital of France?" } };
	x4_chat_msg t2[] = { { "system", "You are terse." },
			     { "user", "What is the capital of France?" },
			     { "assistant", "Paris." },
			     { "user", "And Japan?" } };
	int32_t *a = NULL, *b = NULL;
	size_t na = 0, nb = 0;
	int rc = x4_prefix_store_create(&ps, (uint64_t)1 << 30, &e);
	rc = rc ? rc : x4_chat_tokenize(tok, t1, 2, true, &a, &na, &e);
	rc = rc ? rc : x4_chat_tokenize(tok, t2, 4, true, &b, &nb, &e);
	if (rc) {
		T_OK(0, "session.prefix.chat", "%s", e.msg);
		return;
	}
	size_t shared = 0;
	while (shared < na && shared < nb && a[shared] == b[shared])
		shared++;
	/* Turn 1, whatever the tiny model answers: its rows and its fed
	 * tokens are offered. */
	x4_request r = { .chat = t1, .n_chat = 2, .max_tokens = 8, .ignore_eos = true,
			 .sampler = { .top_p = 1 }, .opts = o, .prefix = ps };
	rc = x4_session_generate(s, &r, &st, &e);
	size_t n1 = st.n_prompt, fed = (size_t)x4_trunk_pos(x4_session_trunk(s));
	r.chat = t2;
	r.n_chat = 4;
	rc = rc ? rc : x4_session_generate(s, &r, &st, &e);
	printf("# chat: turn 1 is %zu ids (%zu in the cache with the fed reply), turn 2 %zu; "
	       "they share %zu; the store restored %zu and turn 2 forwarded %zu\n", na, fed, nb,
	       shared, st.n_reused, st.n_prefilled);
	/* The two part where the generation prompt's <think> meets the past
	 * turn's </think>: everything up to and with the first <_bot> (turn 1
	 * less its <think> and newline) is shared, and nothing after it. */
	int32_t bot = x4_token_find(tok, "<_bot>"), think = x4_token_find(tok, "<think>");
	int32_t unthink = x4_token_find(tok, "</think>");
	T_OK(!rc && n1 == na && shared == na - 2 && a[shared - 1] == bot && a[shared] == think &&
	     b[shared] == unthink && st.n_reused == shared && st.n_prefilled == nb - shared,
	     "session.prefix.chat_turn2_reuses_up_to_bot", "rc %d, turn 1 %zu ids, turn 2 %zu, "
	     "shared %zu (want %zu), restored %zu", rc, na, nb, shared, na - 2, st.n_reused);
	/* Pinned for this vocabulary: the shared 15 are <_system> You ▁are ▁ter
	 * se . <_user> What ▁is ▁the ▁capital ▁of ▁France ? <_bot> (no dummy
	 * prefix after a marker, lib/tok/chat.c); turn 1 adds <think> <0x0A>; turn
	 * 2 goes on </think> Par is . <_end> <0x0A> <_user> And ▁Japan ? <_bot>
	 * <think> <0x0A>, 13 ids forwarded of 28. */
	T_OK(na == 17 && nb == 28 && shared == 15, "session.prefix.chat_counts",
	     "turn 1 %zu ids, turn 2 %zu, shared %zu (want 17, 28, 15)", na, nb, shared);
	/* The control: a client that sends turn 1's own ids back (the prompt,
	 * the fed reply, then the next user turn as ids) gets all of turn 1's
	 * cache restored: what turn 2 loses is the template's doing. */
	const char *next = "<_user>And Japan?<_bot><think>\n";
	int32_t *tail = NULL, *c = NULL;
	size_t nt = 0, nc = 0;
	rc = rc ? rc : x4_tokenize(tok, next, strlen(next), X4_TOKENIZE_SPECIAL, &tail, &nt, &e);
	x4_prefix_store_clear(ps);
	r = (x4_request){ .chat = t1, .n_chat = 2, .max_tokens = 8, .ignore_eos = true,
			  .sampler = { .top_p = 1 }, .opts = o, .prefix = ps };
	rc = rc ? rc : x4_session_generate(s, &r, &st, &e);
	if (!rc && (c = malloc((na + st.n_gen + nt) * sizeof *c))) {
		/* the last generated token is not fed: the cache holds the rest */
		nc = na + st.n_gen - 1;
		memcpy(c, a, na * sizeof *c);
		memcpy(c + na, st.tokens, (st.n_gen - 1) * sizeof *c);
		memcpy(c + nc, tail, nt * sizeof *c);
		nc += nt;
		x4_request r3 = { .ids = c, .n_ids = nc, .max_tokens = 2, .ignore_eos = true,
				  .sampler = { .top_p = 1 }, .opts = o, .prefix = ps };
		rc = x4_session_generate(s, &r3, &st, &e);
	}
	T_OK(!rc && c && st.n_reused == fed, "session.prefix.chat_raw_ids_reuse_all",
	     "rc %d, restored %zu of %zu (want %zu: turn 1 and its fed reply)", rc, st.n_reused,
	     nc, fed);
	free(tail);
	free(c);
	free(a);
	free(b);
	x4_prefix_store_free(ps);
	x4_session_close(s);
}

/* on_end: once, after the last token and before the offer to the store
 * (the store does not yet hold the request's rows), with the final counts;
 * never for a request that fails. */
struct end_seen {
	x4_prefix_store *ps;
	int calls;
	size_t n_gen;
	uint64_t entries;
	double offer_s;
};

static void end_cb(void *ctx, const x4_gen_stats *st)
{
	struct end_seen *v = ctx;
	x4_prefix_stats a;
	x4_prefix_store_stats(v->ps, &a);
	v->calls++;
	v->n_gen = st->n_gen;
	v->entries = a.entries;
	v->offer_s = st->offer_s;
}

static void store_on_end(const x4_trunk_opts *o)
{
	x4_err e = {0};
	x4_session *s = open_tiny();
	x4_prefix_store *ps = NULL;
	if (x4_prefix_store_create(&ps, (uint64_t)1 << 30, &e)) {
		T_OK(0, "session.on_end", "create: %s", e.msg);
		return;
	}
	int32_t p[12];
	for (int i = 0; i < 12; i++)
		p[i] = 700 + 31 * i;
	struct end_seen v = { .ps = ps };
	x4_request r = { .ids = p, .n_ids = 12, .max_tokens = 6, .ignore_eos = true,
			 .sampler = { .top_p = 1 }, .opts = o, .prefix = ps, .on_end = end_cb,
			 .ctx = &v };
	x4_gen_stats st;
	int rc = x4_session_generate(s, &r, &st, &e);
	x4_prefix_stats a;
	x4_prefix_store_stats(ps, &a);
	T_OK(!rc && v.calls == 1 && v.n_gen == 6 && v.entries == 0 && v.offer_s == 0 &&
	     a.entries == 1, "session.on_end_before_offer", "rc %d, %d calls, %zu tokens, %llu "
	     "entries at the call, %llu after", rc, v.calls, v.n_gen,
	     (unsigned long long)v.entries, (unsigned long long)a.entries);
	v.calls = 0;
	r.max_tokens = -1;
	rc = x4_session_generate(s, &r, &st, &e);
	T_OK(rc == X4_EINVAL && v.calls == 0, "session.on_end_not_on_failure", "rc %d, %d calls",
	     rc, v.calls);
	x4_prefix_store_free(ps);
	x4_session_close(s);
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
	store_budget(&o);
	store_keys(&o);
	store_cancel(&o, longp);
	store_chat(&o);
	store_on_end(&o);
	return t_done();
}
