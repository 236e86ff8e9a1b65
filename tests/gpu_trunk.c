/*
 * gpu_trunk.c - the CUDA trunk's contract on the tiny preset (issue 4,
 * deliverables 3 and 4), through the public API only:
 *   - sublayer by sublayer, the GPU's last-token state (x-hat, y, the
 *     streams, the gate's post and comb, the experts and their weights)
 *     against the CPU fp32 trunk's, so that a failure names the first
 *     sublayer where the two part;
 *   - a second request after reset does not see the first (docs/record.md
 *     7): its logits are bit-identical to a fresh trunk's;
 *   - the same prompt twice gives bit-identical logits;
 *   - a context overflow is X4_ERANGE before any work;
 *   - prefill in chunks of 16, and prefill then one decode step, agree
 *     with one whole prefill; the eager hyper-connection path agrees with
 *     the fused kernel;
 *   - the load statistics are filled;
 *   - programmatic dependent launch on gives the same tokens and bits;
 *   - the decode step's graph, captured while the prompt's last chunk runs,
 *     gives the eager steps' tokens, and is captured again for other
 *     sampler options;
 *   - cache rows read and restored into another trunk (the prefix store,
 *     lib/run/prefix.c): the continuation gives the saved trunk's logits bit
 *     for bit, a fresh whole prefill's within the fp32-paths bound, and
 *     sampled tokens as a fresh trunk's (the sampler's counter restarts).
 * Usage: build/tests/gpu_trunk [MODEL] (default build/models/tiny), from the
 * tree's root.
 */
#include "t.h"
#include "x4.h"
#include "x4_kern.h" /* x4k_pdl_set */

#include <math.h>

#define MAX_ROWS 256
#define N_A 40 /* prompt A's tokens */
#define N_B 12 /* prompt B's tokens */

/* Tolerances.  GPU fp32 against CPU fp32: the same arithmetic in another
 * summation order (errors of a few 2^-24 per product) and the same fp16
 * cache, except where a value sits on an fp16 rounding boundary and moves
 * one fp16 ulp (2^-11 relative); through 4 blocks that stays far below the
 * fp16 tolerance 4e-3 of docs/numerics.md 4, so 1e-3 (relative to the largest value) is
 * the bound for every comparison between two fp32 paths. */
#define TOL_FP32_PATHS 1e-3

static x4_err err;
static bool eager; /* the next trunk mk() makes takes the eager gate */

/* max |a - b| / max |b| over n values; INFINITY when a has a non-finite value. */
static double rel(const float *a, const float *b, size_t n)
{
	double d = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(a[i]))
			return INFINITY;
		d = fmax(d, fabs((double)a[i] - b[i]));
		s = fmax(s, fabs((double)b[i]));
	}
	return d / (s > 0 ? s : 1);
}

/* ---- the probe: every sublayer's last-token state, copied ---- */

typedef struct snap {
	int block, sublayer;
	float *streams, *y, *xh, post[8], comb[64], w[16];
	int experts[16];
	bool moe;
} snap;

typedef struct rec {
	const x4_config *c;
	snap rows[MAX_ROWS];
	int n;
} rec;

static void on_probe(void *ctx, const x4_probe_row *p)
{
	rec *r = ctx;
	if (r->n >= MAX_ROWS)
		return;
	const x4_config *c = r->c;
	size_t D = (size_t)c->n_embd, hc = (size_t)c->n_hc;
	snap *s = &r->rows[r->n++];
	s->block = p->block;
	s->sublayer = p->sublayer;
	s->streams = malloc(sizeof(float) * hc * D);
	s->y = malloc(sizeof(float) * D);
	s->xh = malloc(sizeof(float) * D);
	if (!s->streams || !s->y || !s->xh)
		abort();
	memcpy(s->streams, p->streams, sizeof(float) * hc * D);
	memcpy(s->y, p->sub_out, sizeof(float) * D);
	memcpy(s->xh, p->sub_in, sizeof(float) * D);
	memcpy(s->post, p->post, sizeof(float) * hc);
	memcpy(s->comb, p->comb, sizeof(float) * hc * hc);
	s->moe = p->experts != NULL;
	for (int j = 0; s->moe && j < c->n_expert_used; j++) {
		s->experts[j] = p->experts[j];
		s->w[j] = p->expert_w[j];
	}
}

static void rec_free(rec *r)
{
	for (int i = 0; i < r->n; i++) {
		free(r->rows[i].streams);
		free(r->rows[i].y);
		free(r->rows[i].xh);
	}
	r->n = 0;
}

/* ---- helpers ---- */

static x4_trunk *mk(const x4_model *m, int device, int max_ctx, int chunk)
{
	x4_trunk_opts o;
	x4_trunk_opts_default(&o);
	o.device = device;
	o.max_ctx = max_ctx;
	o.prefill_chunk = chunk;
	o.hc_eager = eager;
	x4_trunk *t = NULL;
	if (x4_trunk_create(&t, m, &o, &err))
		return NULL;
	return t;
}

static bool fwd(x4_trunk *t, const int32_t *ids, int n, float *logits, bool all)
{
	return t && x4_trunk_forward(t, ids, n, logits, all, &err) == 0;
}

/* Sublayer by sublayer, GPU against CPU fp32, for prompt A. */
static void parity_by_sublayer(const x4_model *m, const int32_t *ids)
{
	const x4_config *c = x4_model_config(m);
	static rec gpu, cpu;
	gpu.c = cpu.c = c;
	x4_trunk *tg = mk(m, 0, 0, 0), *tc = mk(m, -1, 0, 0);
	if (!tg || !tc) {
		T_OK(0, "gpu_trunk.parity.create", "%s", err.msg);
		x4_trunk_free(tg);
		x4_trunk_free(tc);
		return;
	}
	x4_trunk_set_probe(tg, on_probe, &gpu);
	x4_trunk_set_probe(tc, on_probe, &cpu);
	bool ok = fwd(tg, ids, N_A, NULL, false) && fwd(tc, ids, N_A, NULL, false);
	T_OK(ok && gpu.n == 2 * c->n_block && cpu.n == gpu.n, "gpu_trunk.parity.probe_rows",
	     "%s; %d GPU and %d CPU probe rows, want %d", ok ? "ok" : err.msg, gpu.n, cpu.n,
	     2 * c->n_block);
	size_t D = (size_t)c->n_embd, hc = (size_t)c->n_hc;
	int first_bad = -1;
	for (int i = 0; ok && i < gpu.n && i < cpu.n; i++) {
		snap *g = &gpu.rows[i], *h = &cpu.rows[i];
		double exh = rel(g->xh, h->xh, D), ey = rel(g->y, h->y, D);
		double es = rel(g->streams, h->streams, hc * D);
		double ep = rel(g->post, h->post, hc), ec = rel(g->comb, h->comb, hc * hc);
		bool same_exp = g->moe == h->moe, wok = true;
		for (int j = 0; g->moe && j < c->n_expert_used; j++) {
			same_exp &= g->experts[j] == h->experts[j];
			wok &= fabs((double)g->w[j] - h->w[j]) <= TOL_FP32_PATHS * fabs((double)h->w[j]);
		}
		bool good = g->block == h->block && g->sublayer == h->sublayer &&
			    exh <= TOL_FP32_PATHS && ey <= TOL_FP32_PATHS && es <= TOL_FP32_PATHS &&
			    ep <= TOL_FP32_PATHS && ec <= TOL_FP32_PATHS && same_exp && wok;
		/* One line a sublayer, so a failing log shows where they part. */
		printf("# block %d %s: rel err x-hat %.3g, y %.3g, streams %.3g, post %.3g, "
		       "comb %.3g%s\n", h->block, h->sublayer ? "ffn " : "attn", exh, ey, es, ep, ec,
		       !h->moe ? "" : same_exp ? ", experts equal" : ", EXPERTS DIFFER");
		if (!good && first_bad < 0)
			first_bad = i;
	}
	T_OK(ok && first_bad < 0, "gpu_trunk.parity.every_sublayer_vs_cpu_f32",
	     "first sublayer past %g (or with other experts): block %d %s (see the '#' lines)",
	     TOL_FP32_PATHS, first_bad < 0 ? -1 : cpu.rows[first_bad].block,
	     first_bad < 0 ? "-" : cpu.rows[first_bad].sublayer ? "ffn" : "attn");
	/* The routed weights are normalised and scaled (docs/forward.md 7.2). */
	bool wsum = true;
	for (int i = 0; i < gpu.n; i++) {
		if (!gpu.rows[i].moe || !c->expert_norm)
			continue;
		double s = 0;
		for (int j = 0; j < c->n_expert_used; j++)
			s += gpu.rows[i].w[j];
		wsum &= fabs(s - c->expert_scale) <= 1e-5 * c->expert_scale;
	}
	T_OK(ok && wsum, "gpu_trunk.parity.expert_weights_sum_to_scale",
	     "the GPU's routed weights do not sum to %g", c->expert_scale);
	rec_free(&gpu);
	rec_free(&cpu);
	x4_trunk_free(tg);
	x4_trunk_free(tc);
}

/* Prompt A, then 8 greedy decode steps through the graphed step, then one
 * more token's logits through the plain forward, on a fresh trunk. */
/* n ids with the device pick, then k decode steps; toks[k + 1] the picks. */
static bool decode(x4_trunk *t, const int32_t *ids, int n, const x4_sampler_opts *so, int k,
		   int32_t *toks)
{
	int32_t next = 0;
	bool ok = t && x4_trunk_forward_next(t, ids, n, NULL, so, &next, NULL, &err) == 0;
	for (int i = 0; ok && i < k; i++) {
		toks[i] = next;
		ok = x4_trunk_forward_next(t, &toks[i], 1, NULL, so, &next, NULL, &err) == 0;
	}
	toks[k] = next;
	return ok;
}

static bool steps(const x4_model *m, const int32_t *a, int32_t *toks, float *logits)
{
	x4_trunk *t = mk(m, 0, 0, 0);
	x4_sampler_opts so = { 0.0f, 0, 1.0f, 1 };
	bool ok = decode(t, a, N_A, &so, 8, toks) && fwd(t, &toks[8], 1, logits, false);
	x4_trunk_free(t);
	return ok;
}

/* Programmatic dependent launch (x4k_pdl_set; sm_90 and later) changes the
 * schedule, not the arithmetic: the same tokens and the same bits, a race
 * (a kernel reading before its wait) would show as other bits. */
static void pdl_same_bits(const x4_model *m, const int32_t *a, int V)
{
	int32_t t0[9], t1[9];
	float *l0 = malloc(sizeof(float) * (size_t)V), *l1 = malloc(sizeof(float) * (size_t)V);
	if (!l0 || !l1)
		abort();
	x4k_pdl_set(0);
	bool ok = steps(m, a, t0, l0);
	x4k_pdl_set(1);
	bool ok1 = steps(m, a, t1, l1);
	x4k_pdl_set(0);
	T_OK(ok && ok1 && !memcmp(t0, t1, sizeof t0) && !memcmp(l0, l1, sizeof(float) * (size_t)V),
	     "gpu_trunk.pdl_same_bits", "%s; tokens %s, logits rel diff %.3g", ok && ok1 ? "ok" : err.msg,
	     ok && ok1 && !memcmp(t0, t1, sizeof t0) ? "equal" : "differ",
	     ok && ok1 ? rel(l1, l0, (size_t)V) : NAN);
	free(l0);
	free(l1);
}

/* The decode graph that the prefill captures (trunk_cuda_fwd.c's run): 8
 * sampled steps, then after a reset 8 greedy ones (other sampler options:
 * captured again), against a trunk that runs every step eagerly. */
static void graph_from_prefill(const x4_model *m, const int32_t *a)
{
	x4_trunk_opts o;
	x4_trunk_opts_default(&o);
	o.device = 0;
	o.hc_eager = eager;
	o.no_graph = true;
	x4_trunk *tg = mk(m, 0, 0, 0), *te = NULL;
	if (x4_trunk_create(&te, m, &o, &err))
		te = NULL;
	const x4_sampler_opts samp = { 0.8f, 40, 0.95f, 7 }, greedy = { 0.0f, 0, 1.0f, 1 };
	int32_t g0[9], e0[9], g1[9], e1[9];
	bool ok = decode(tg, a, N_A, &samp, 8, g0) && decode(te, a, N_A, &samp, 8, e0);
	if (ok) {
		x4_trunk_reset(tg);
		x4_trunk_reset(te);
		ok = decode(tg, a, N_A, &greedy, 8, g1) && decode(te, a, N_A, &greedy, 8, e1);
	}
	T_OK(ok && !memcmp(g0, e0, sizeof g0) && !memcmp(g1, e1, sizeof g1),
	     "gpu_trunk.graph_captured_in_prefill", "%s; sampled tokens %s, greedy %s",
	     ok ? "ok" : err.msg, ok && !memcmp(g0, e0, sizeof g0) ? "equal" : "differ",
	     ok && !memcmp(g1, e1, sizeof g1) ? "equal" : "differ");
	x4_trunk_free(tg);
	x4_trunk_free(te);
}

/* The prefix store's copies on the GPU: rows of A's first K positions read
 * from one trunk and restored into another that ran something else first. */
static void cache_restore(const x4_model *m, const int32_t *a, const int32_t *b, int V,
			  const float *whole)
{
	const x4_config *c = x4_model_config(m);
	enum { K = 30 };
	size_t n = N_A - K, nv = (size_t)V;
	float *lx = malloc(sizeof(float) * n * nv), *ly = malloc(sizeof(float) * n * nv);
	x4_trunk *ta = mk(m, 0, 0, 0), *tb = mk(m, 0, 0, 0);
	uint64_t rb = ta ? x4_trunk_cache_row_bytes(ta) : 0;
	char *rows = malloc((size_t)(rb ? rb : 1) * K), *back = malloc((size_t)(rb ? rb : 1) * K);
	if (!lx || !ly || !rows || !back)
		abort();
	bool ok = fwd(ta, a, K, NULL, false) && fwd(ta, a + K, (int)n, lx, true) &&
		  x4_trunk_cache_read(ta, K, rows, &err) == 0;
	T_OK(ok && rb == (uint64_t)c->n_block * (uint64_t)(c->kv_lora + c->d_rope) * 2,
	     "gpu_trunk.cache.read", "%s; %llu bytes a row", ok ? "ok" : err.msg,
	     (unsigned long long)rb);
	int32_t s0[5], s1[5];
	x4_sampler_opts so = { 0.8f, 40, 0.95f, 7 };
	int32_t junk = 0;
	/* tb samples first (its counter moves), then is restored. */
	bool ok2 = ok && fwd(tb, b, N_B, NULL, false) &&
		   x4_trunk_forward_next(tb, b, 3, NULL, &so, &junk, NULL, &err) == 0 &&
		   x4_trunk_cache_restore(tb, K, rows, &err) == 0;
	int pos = tb ? x4_trunk_pos(tb) : -1;
	ok2 = ok2 && fwd(tb, a + K, (int)n, ly, true) && x4_trunk_cache_read(tb, K, back, &err) == 0;
	T_OK(ok2 && pos == K && !memcmp(rows, back, (size_t)rb * K) &&
	     !memcmp(lx, ly, sizeof(float) * n * nv), "gpu_trunk.cache.restore_continues_bits",
	     "%s; pos %d after restoring %d, rows read back %s, continuation rel diff %.3g",
	     ok2 ? "ok" : err.msg, pos, K, ok2 && !memcmp(rows, back, (size_t)rb * K) ? "equal" :
	     "differ", ok2 ? rel(ly, lx, n * nv) : NAN);
	double ew = ok2 ? rel(ly, whole + (size_t)K * nv, n * nv) : NAN;
	T_OK(ok2 && ew <= TOL_FP32_PATHS, "gpu_trunk.cache.restore_vs_whole_prefill",
	     "%s; rel err %.3g against one whole prefill (tolerance %g)", ok2 ? "ok" : err.msg, ew,
	     TOL_FP32_PATHS);
	printf("# restored %d positions then %zu forwarded vs one prefill: rel err %.3g\n", K, n, ew);
	/* The sampler after a restore draws as a fresh trunk's does. */
	x4_trunk *tf = mk(m, 0, 0, 0);
	ok = fwd(tf, a, K, NULL, false) && decode(tf, a + K, (int)n, &so, 4, s0);
	ok2 = tb && x4_trunk_cache_restore(tb, K, rows, &err) == 0 &&
	      decode(tb, a + K, (int)n, &so, 4, s1);
	T_OK(ok && ok2 && !memcmp(s0, s1, sizeof s0), "gpu_trunk.cache.restore_sampler_restarts",
	     "%s; sampled tokens %s", ok && ok2 ? "ok" : err.msg,
	     ok && ok2 && !memcmp(s0, s1, sizeof s0) ? "equal" : "differ");
	int r1 = tb ? x4_trunk_cache_read(tb, x4_trunk_pos(tb) + 1, back, &err) : -100;
	int r2 = tb ? x4_trunk_cache_restore(tb, 1 << 30, rows, &err) : -100;
	T_OK(r1 == X4_ERANGE && r2 == X4_ERANGE, "gpu_trunk.cache.range_errors",
	     "read past the length: %d, restore past the cache: %d", r1, r2);
	x4_trunk_free(ta);
	x4_trunk_free(tb);
	x4_trunk_free(tf);
	free(lx);
	free(ly);
	free(rows);
	free(back);
}

int main(int argc, char **argv)
{
	const char *model = argc > 1 ? argv[1] : "build/models/tiny";
	x4_paths paths;
	x4_model *m = NULL;
	if (x4_paths_resolve(model, NULL, &paths, &err) || x4_model_open(&m, &paths, &err)) {
		T_OK(0, "gpu_trunk.open", "%s (run make tiny)", err.msg);
		return t_done();
	}
	const x4_config *c = x4_model_config(m);
	int V = c->n_vocab;
	int32_t a[N_A], b[N_B];
	uint32_t s = 12345;
	for (int i = 0; i < N_A; i++) {
		s = s * 1103515245u + 12345u;
		a[i] = 3 + (int32_t)((s >> 8) % (uint32_t)(V - 3));
	}
	for (int i = 0; i < N_B; i++) {
		s = s * 1103515245u + 12345u;
		b[i] = 3 + (int32_t)((s >> 8) % (uint32_t)(V - 3));
	}
	float *l1 = malloc(sizeof(float) * (size_t)N_A * V);
	float *l2 = malloc(sizeof(float) * (size_t)N_A * V);
	float *l3 = malloc(sizeof(float) * (size_t)N_A * V);
	if (!l1 || !l2 || !l3)
		abort();

	/* Create, and the statistics x4-run prints. */
	x4_trunk *t = mk(m, 0, 0, 0);
	T_OK(t, "gpu_trunk.create", "%s", err.msg);
	if (!t)
		return t_done();
	x4_trunk_stats st;
	x4_trunk_get_stats(t, &st);
	uint64_t cache_want = (uint64_t)c->n_block * (uint64_t)st.max_ctx *
			      (uint64_t)(c->kv_lora + c->d_rope) * 2;
	T_OK(st.resident_bytes > 0 && st.load_s > 0 && st.cache_bytes == cache_want &&
	     st.prefill_chunk >= 1 && st.prefill_chunk <= X4_MEM_MAX_CHUNK && st.device[0],
	     "gpu_trunk.stats", "resident %llu, load %g s, cache %llu (want %llu), chunk %d, '%s'",
	     (unsigned long long)st.resident_bytes, st.load_s, (unsigned long long)st.cache_bytes,
	     (unsigned long long)cache_want, st.prefill_chunk, st.device);
	printf("# %s: %.1f MiB resident, loaded in %.3f s; cache %.1f MiB for %d positions; "
	       "prefill chunk %d\n", st.device, st.resident_bytes / 1048576.0, st.load_s,
	       st.cache_bytes / 1048576.0, st.max_ctx, st.prefill_chunk);

	/* docs/record.md 7: prompt A and some decode steps, reset, then prompt
	 * B must give exactly a fresh trunk's logits for B. */
	bool ok = fwd(t, a, N_A, NULL, false);
	for (int i = 0; ok && i < 5; i++)
		ok = fwd(t, &a[i], 1, l3, false);
	x4_trunk_reset(t);
	T_OK(ok && x4_trunk_pos(t) == 0, "gpu_trunk.reset.pos", "%s; pos %d after reset",
	     ok ? "ok" : err.msg, x4_trunk_pos(t));
	ok = ok && fwd(t, b, N_B, l1, true);
	x4_trunk *fresh = mk(m, 0, 0, 0);
	bool ok2 = fwd(fresh, b, N_B, l2, true);
	T_OK(ok && ok2 && memcmp(l1, l2, sizeof(float) * (size_t)N_B * V) == 0,
	     "gpu_trunk.reset.second_request_does_not_see_the_first",
	     "%s; B after A and reset differs from B on a fresh trunk by %.3g",
	     ok && ok2 ? "ok" : err.msg, ok && ok2 ? rel(l1, l2, (size_t)N_B * V) : NAN);
	/* The control: without the reset B does see A (the check can fail). */
	x4_trunk_reset(t);
	ok = fwd(t, a, N_A, NULL, false) && fwd(t, b, N_B, l3, true);
	T_OK(ok && memcmp(l3, l2, sizeof(float) * (size_t)N_B * V) != 0,
	     "gpu_trunk.reset.control_context_is_used", "%s; B after A without a reset gave a "
	     "fresh trunk's logits", ok ? "ok" : err.msg);

	/* The same prompt twice: bit-identical (one writer per MoE output,
	 * fixed-order sums). */
	x4_trunk_reset(fresh);
	ok = fwd(fresh, b, N_B, l3, true);
	T_OK(ok && memcmp(l3, l2, sizeof(float) * (size_t)N_B * V) == 0,
	     "gpu_trunk.repeat_bit_identical", "%s; rel diff %.3g", ok ? "ok" : err.msg,
	     ok ? rel(l3, l2, (size_t)N_B * V) : NAN);
	x4_trunk_free(fresh);

	/* Prefill in chunks of 16 against one whole chunk; prefill of A minus
	 * its last token then a decode step against the whole prefill's last
	 * row (gemm vs gemv, prefill vs split decode attention). */
	x4_trunk_reset(t);
	ok = fwd(t, a, N_A, l1, true);
	cache_restore(m, a, b, V, l1);
	x4_trunk *t16 = mk(m, 0, 0, 16);
	ok2 = fwd(t16, a, N_A, l2, true);
	double e16 = ok && ok2 ? rel(l2, l1, (size_t)N_A * V) : NAN;
	T_OK(ok && ok2 && e16 <= TOL_FP32_PATHS, "gpu_trunk.prefill_chunks_of_16",
	     "%s; rel err %.3g against one chunk (tolerance %g)", ok && ok2 ? "ok" : err.msg, e16,
	     TOL_FP32_PATHS);
	printf("# chunks of 16 vs one chunk: rel err %.3g\n", e16);
	x4_trunk_reset(t16);
	ok2 = fwd(t16, a, N_A - 1, NULL, false) && fwd(t16, &a[N_A - 1], 1, l2, false);
	double edec = ok && ok2 ? rel(l2, l1 + (size_t)(N_A - 1) * V, (size_t)V) : NAN;
	T_OK(ok && ok2 && edec <= TOL_FP32_PATHS, "gpu_trunk.decode_step_vs_prefill_row",
	     "%s; rel err %.3g (tolerance %g)", ok && ok2 ? "ok" : err.msg, edec, TOL_FP32_PATHS);
	printf("# decode step vs prefill row: rel err %.3g\n", edec);
	x4_trunk_free(t16);
	/* The eager gate (five launches) against the fused kernel, prefill and
	 * a decode step: the same arithmetic, so the fp32-paths bound. */
	eager = true;
	x4_trunk *te = mk(m, 0, 0, 0);
	eager = false;
	ok2 = fwd(te, a, N_A - 1, l2, true) && fwd(te, &a[N_A - 1], 1, l2 + (size_t)(N_A - 1) * V, false);
	double eeag = ok && ok2 ? rel(l2, l1, (size_t)N_A * V) : NAN;
	T_OK(ok && ok2 && eeag <= TOL_FP32_PATHS, "gpu_trunk.hc_eager_vs_fused",
	     "%s; rel err %.3g (tolerance %g)", ok && ok2 ? "ok" : err.msg, eeag, TOL_FP32_PATHS);
	printf("# eager gate vs fused: rel err %.3g\n", eeag);
	x4_trunk_free(te);

	/* A context overflow is refused before any work, and the trunk goes on. */
	x4_trunk *ts = mk(m, 0, 16, 0);
	int rc = ts ? x4_trunk_forward(ts, a, 17, l1, false, &err) : -100;
	T_OK(ts && rc == X4_ERANGE && x4_trunk_pos(ts) == 0, "gpu_trunk.overflow.refused",
	     "forward of 17 into 16 positions returned %d (%s), pos %d", rc, err.msg,
	     ts ? x4_trunk_pos(ts) : -1);
	ok = fwd(ts, a, 16, l1, false);
	rc = ts ? x4_trunk_forward(ts, a, 1, l1, false, &err) : -100;
	T_OK(ts && ok && rc == X4_ERANGE && x4_trunk_pos(ts) == 16, "gpu_trunk.overflow.full",
	     "16 tokens then 1 more: %d, pos %d", rc, ts ? x4_trunk_pos(ts) : -1);
	x4_trunk_free(ts);
	x4_trunk_free(t);

	parity_by_sublayer(m, a);
	pdl_same_bits(m, a, V);
	graph_from_prefill(m, a);

	free(l1);
	free(l2);
	free(l3);
	x4_model_close(m);
	return t_done();
}
