/*
 * trunk_cpu_tmpl.h - the CPU trunk's forward pass (docs/forward.md), written
 * once over a real type and compiled twice: lib/cpu/trunk_cpu_f32.c (REAL
 * float: what users run) and lib/cpu/trunk_cpu_f64.c (REAL double: the oracle
 * the F32 trunk and every GPU kernel are checked against).  Both read the
 * same dequantized weights; only the arithmetic's width differs, plus the
 * cache (fp16 values in F32 as the earlier runtime stored them, double in
 * F64; enum x4_kv overrides either).
 *
 * Before including: REAL, REAL_IS_FLOAT, SFX (f32/f64), R_EXP/R_SQRT (the
 * type's exp and sqrt).
 *
 * The cache is held in REAL; when its values are fp16 (X4_KV_F16, the F32
 * default) each is rounded to fp16 as it is written, which is the same
 * arithmetic as storing fp16 and reading it back, at twice the memory and
 * with a plain load on every read.
 *
 * F32 mode keeps the sublayer inputs x-hat in fp32 (docs/numerics.md 1.3: they may
 * be narrowed; on the CPU narrowing buys nothing).  Every output element of
 * every product is computed by one worker in a fixed order, so the result
 * does not depend on the thread count, and a decode step computes each
 * token exactly as the prefill of a chunk does.
 */
#include "prof_int.h"
#include "trunk_int.h"
#include "x4_kern.h"

#include <math.h>

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(n) CAT(n, SFX)

/* ---- dot products (fixed lane order: deterministic, vectorizable) ---- */

#if REAL_IS_FLOAT
typedef float FN(vec) __attribute__((vector_size(32)));
#define LANES 8
#else
typedef double FN(vec) __attribute__((vector_size(32)));
#define LANES 4
#endif
typedef FN(vec) vec_t;

static inline REAL FN(hsum)(const vec_t *v)
{
	REAL s = 0;
	for (int i = 0; i < LANES; i++)
		s += (*v)[i];
	return s;
}

static inline REAL FN(dot)(const REAL *a, const REAL *b, int n)
{
	vec_t s0 = { 0 };
	int k = 0;
	for (; k + LANES <= n; k += LANES) {
		vec_t a0, b0;
		memcpy(&a0, a + k, sizeof a0);
		memcpy(&b0, b + k, sizeof b0);
		s0 += a0 * b0;
	}
	REAL s = FN(hsum)(&s0);
	for (; k < n; k++)
		s += a[k] * b[k];
	return s;
}

/* Four dots sharing a: each is computed exactly as FN(dot) computes it
 * (same lanes, same order), so a prefill's rows equal a decode's bit for
 * bit; a is loaded once for four tokens. */
static inline void FN(dot4)(const REAL *a, const REAL *b0, const REAL *b1, const REAL *b2,
			    const REAL *b3, int n, REAL *out)
{
	vec_t s0 = { 0 }, s1 = { 0 }, s2 = { 0 }, s3 = { 0 };
	int k = 0;
	for (; k + LANES <= n; k += LANES) {
		vec_t av, v0, v1, v2, v3;
		memcpy(&av, a + k, sizeof av);
		memcpy(&v0, b0 + k, sizeof v0);
		memcpy(&v1, b1 + k, sizeof v1);
		memcpy(&v2, b2 + k, sizeof v2);
		memcpy(&v3, b3 + k, sizeof v3);
		s0 += av * v0;
		s1 += av * v1;
		s2 += av * v2;
		s3 += av * v3;
	}
	REAL r0 = FN(hsum)(&s0), r1 = FN(hsum)(&s1), r2 = FN(hsum)(&s2), r3 = FN(hsum)(&s3);
	for (; k < n; k++) {
		r0 += a[k] * b0[k];
		r1 += a[k] * b1[k];
		r2 += a[k] * b2[k];
		r3 += a[k] * b3[k];
	}
	out[0] = r0;
	out[1] = r1;
	out[2] = r2;
	out[3] = r3;
}

/* A weight row dequantized to float, widened to REAL in F64 mode. */
static const REAL *FN(row)(x4_trunk_cpu *t, int worker, const x4_gguf_tensor *w, uint64_t r)
{
	uint64_t K = w->ne[0];
	const uint8_t *src = (const uint8_t *)w->data + r * x4_type_bytes(w->type, K);
	float *f = t->wrow[worker];
#if REAL_IS_FLOAT
	if (w->type == X4_T_F32)
		return (const float *)src; /* GGUF data is 32-byte aligned, rows 4-byte */
#endif
	x4_cpu_dequant_row(w->type, src, f, K);
#if REAL_IS_FLOAT
	return f;
#else
	/* Widen in place from the end: the double row needs twice the room,
	 * which ws_alloc gave wrow. */
	double *d = (double *)f;
	for (uint64_t k = K; k-- > 0;)
		d[k] = f[k];
	return d;
#endif
}

/* ---- matrix products: a list of jobs run as one pool dispatch ---- */

typedef struct FN(mm_job) {
	const x4_gguf_tensor *w;
	uint64_t row0;   /* first weight row (an expert's or a head's slice) */
	int N, K, T;     /* rows, row length, input vectors */
	const REAL *x;   /* [T][ldx] */
	size_t ldx;
	REAL *y;         /* [T][ldy]: y[t][r] = W[row0 + r] . x[t] */
	size_t ldy;
} FN(mm_job);

struct FN(mm_ctx) {
	x4_trunk_cpu *t;
	FN(mm_job) *jobs;
	int njobs, rows_per;
	int64_t *first; /* [njobs + 1] first task of each job */
};

static void FN(mm_task)(void *arg, int64_t i, int worker)
{
	struct FN(mm_ctx) *m = arg;
	int j = 0;
	while (m->first[j + 1] <= i)
		j++;
	FN(mm_job) *b = &m->jobs[j];
	int r0 = (int)(i - m->first[j]) * m->rows_per;
	int r1 = X4_MIN(b->N, r0 + m->rows_per);
	for (int r = r0; r < r1; r++) {
		const REAL *w = FN(row)(m->t, worker, b->w, b->row0 + (uint64_t)r);
		const REAL *x = b->x;
		int tk = 0;
		for (; tk + 4 <= b->T; tk += 4) {
			REAL o[4];
			FN(dot4)(w, x + (size_t)tk * b->ldx, x + (size_t)(tk + 1) * b->ldx,
				 x + (size_t)(tk + 2) * b->ldx, x + (size_t)(tk + 3) * b->ldx, b->K, o);
			for (int q = 0; q < 4; q++)
				b->y[(size_t)(tk + q) * b->ldy + (size_t)r] = o[q];
		}
		for (; tk < b->T; tk++)
			b->y[(size_t)tk * b->ldy + (size_t)r] = FN(dot)(w, x + (size_t)tk * b->ldx, b->K);
	}
}

static void FN(mm_run)(x4_trunk_cpu *t, FN(mm_job) *jobs, int njobs)
{
	int64_t first[njobs + 1];
	int64_t rows = 0;
	for (int j = 0; j < njobs; j++)
		rows += jobs[j].N;
	/* About 8 tasks per worker balances uneven rows; the split never
	 * changes a result, only who computes it. */
	int rows_per = (int)X4_MAX(1, X4_MIN(64, rows / (8 * t->nthr)));
	struct FN(mm_ctx) m = { t, jobs, njobs, rows_per, first };
	first[0] = 0;
	for (int j = 0; j < njobs; j++)
		first[j + 1] = first[j] + (jobs[j].N + rows_per - 1) / rows_per;
	if (first[njobs] > 0)
		x4_pool_run(t->pool, first[njobs], FN(mm_task), &m);
}

static void FN(mm)(x4_trunk_cpu *t, const x4_gguf_tensor *w, const REAL *x, size_t ldx,
		   int T, REAL *y, size_t ldy)
{
	FN(mm_job) j = { w, 0, (int)w->ne[1], (int)w->ne[0], T, x, ldx, y, ldy };
	FN(mm_run)(t, &j, 1);
}

/* ---- small pieces ---- */

static inline REAL FN(sigmoid)(REAL z) { return (REAL)1 / ((REAL)1 + R_EXP(-z)); }

static void FN(rmsnorm)(REAL *out, const REAL *x, const float *gain, int n, float eps)
{
	REAL ss = FN(dot)(x, x, n);
	REAL inv = (REAL)1 / R_SQRT(ss / (REAL)n + (REAL)eps);
	for (int i = 0; i < n; i++)
		out[i] = (x[i] * inv) * (gain ? (REAL)gain[i] : (REAL)1);
}

/* docs/forward.md 5.1 steps 4-8. */
void FN(x4_hc_coef)(const x4_config *c, const REAL *m, const float *base, const float *scale,
		    REAL *pre, REAL *post, REAL *comb)
{
	int n = c->n_hc;
	REAL eps = (REAL)c->hc_eps;
	for (int s = 0; s < n; s++)
		pre[s] = FN(sigmoid)((REAL)scale[0] * m[s] + (REAL)base[s]);
	for (int d = 0; d < n; d++)
		post[d] = 2 * FN(sigmoid)((REAL)scale[1] * m[n + d] + (REAL)base[n + d]);
	for (int d = 0; d < n; d++) {
		REAL *row = comb + d * n;
		REAL mx = -INFINITY;
		for (int s = 0; s < n; s++) {
			REAL v = (REAL)scale[2] * m[2 * n + d * n + s] + (REAL)base[2 * n + d * n + s];
			v = v < (REAL)c->clamp_min ? (REAL)c->clamp_min : v;
			v = v > (REAL)c->clamp_max ? (REAL)c->clamp_max : v;
			row[s] = v;
			mx = v > mx ? v : mx;
		}
		for (int s = 0; s < n; s++)
			row[s] = R_EXP(row[s] - mx);
	}
	for (int it = 0; it < c->sinkhorn_iters; it++) {
		for (int d = 0; d < n; d++) {
			REAL sum = 0;
			for (int s = 0; s < n; s++)
				sum += comb[d * n + s];
			for (int s = 0; s < n; s++)
				comb[d * n + s] /= sum + eps;
		}
		for (int s = 0; s < n; s++) {
			REAL sum = 0;
			for (int d = 0; d < n; d++)
				sum += comb[d * n + s];
			for (int d = 0; d < n; d++)
				comb[d * n + s] /= sum + eps;
		}
	}
}

/* The selection ranks score + bias, summed in the instance's arithmetic,
 * by x4r_topk's rule (ties, NaN: lib/x4_kern.h). */
static void FN(topk)(const REAL *score, const float *bias, double *key, int n, int k, int *sel)
{
	for (int e = 0; e < n; e++)
		key[e] = (double)(score[e] + (bias ? (REAL)bias[e] : (REAL)0));
	x4r_topk(key, n, k, sel);
}

static inline REAL FN(narrow)(int resid, REAL v)
{
	if (resid == X4_RESID_F16)
		return (REAL)x4_f16_to_f32(x4_f32_to_f16((float)v));
	if (resid == X4_RESID_BF16)
		return (REAL)x4_bf16_to_f32(x4_f32_to_bf16((float)v));
	return v;
}

/* The sublayer input handed narrow (opts.sublayer; docs/numerics.md 1.3). */
static void FN(narrow_sub)(const x4_trunk_cpu *t, REAL *xh, size_t n)
{
	int s = t->o.sublayer;
	if (s == X4_SUB_F32)
		return;
	for (size_t i = 0; i < n; i++)
		xh[i] = FN(narrow)(s == X4_SUB_F16 ? X4_RESID_F16 : X4_RESID_BF16, xh[i]);
}

/* ---- workspace ---- */

typedef struct FN(ws) {
	int T;        /* chunk capacity */
	int ncoef;    /* n_hc * (2 + n_hc) */
	int F;        /* widest FFN inner width */
	REAL *H, *Hn; /* [T][n_hc][D] the residual streams, and the update's target */
	REAL *uh;     /* [T][n_hc*D] normalised flattened streams */
	REAL *mix;    /* [T][ncoef] */
	REAL *pre, *post, *comb; /* [T][n_hc], [T][n_hc], [T][n_hc][n_hc] */
	REAL *x, *xh, *y; /* [T][D] collapse, normed sublayer input, sublayer output */
	REAL *cq;     /* [T][q_lora] */
	REAL *q;      /* [T][n_head][d_qk] */
	REAL *kva;    /* [T][cw] */
	REAL *qt;     /* [T][n_head][cw]: q-tilde (kv_lora) then roped q_r (d_rope) */
	REAL *ob;     /* [T][n_head][kv_lora] */
	REAL *o;      /* [T][n_head][d_v] */
	REAL *g, *u;  /* [T][F] dense / shared expert */
	REAL *rl;     /* [T][n_expert] router scores */
	double *key;  /* [n_expert] what the selection ranks */
	int *sel;     /* [T][k] selected experts, selection order */
	REAL *sw;     /* [T][k] their weights */
	int *cnt, *off; /* [n_expert + 1] routes per expert, and their start */
	int *rt, *rs; /* [T*k] route's token and slot, grouped by expert */
	REAL *xe, *ye; /* [T*k][D] gathered inputs, expert outputs */
	REAL *ge, *ue; /* [T*k][n_ff_exp] */
	REAL *acc;    /* [T][D] routed sum */
	REAL *hn;     /* [T][D] head input */
	REAL *rope;   /* [T][d_rope/2][2] cos, sin of each token's angles */
	REAL *logit;  /* [T][n_vocab] (F64: widened into the caller's floats) */
	float *probe; /* [n_hc*D + 2*D + n_hc + n_hc*n_hc + k] the probe's float view */
	int *probe_sel;
} FN(ws);

void FN(x4_cpu_ws_free)(x4_trunk_cpu *t)
{
	FN(ws) *w = t->ws;
	if (!w)
		return;
	REAL **bufs[] = { &w->H, &w->Hn, &w->uh, &w->mix, &w->pre, &w->post, &w->comb, &w->x,
			  &w->xh, &w->y, &w->cq, &w->q, &w->kva, &w->qt, &w->ob, &w->o, &w->g,
			  &w->u, &w->rl, &w->sw, &w->xe, &w->ye, &w->ge, &w->ue, &w->acc, &w->hn,
			  &w->rope, &w->logit };
	for (size_t i = 0; i < X4_ARRAY_LEN(bufs); i++)
		free(*bufs[i]);
	free(w->sel);
	free(w->key);
	free(w->cnt);
	free(w->off);
	free(w->rt);
	free(w->rs);
	free(w->probe);
	free(w->probe_sel);
	free(w);
	t->ws = NULL;
}

int FN(x4_cpu_ws_alloc)(x4_trunk_cpu *t, x4_err *e)
{
	const x4_config *c = t->c;
	FN(ws) *w = x4_calloc(1, sizeof *w, "the trunk workspace", e);
	if (!w)
		return X4_ENOMEM;
	t->ws = w;
	size_t T = (size_t)t->chunk, D = (size_t)c->n_embd, hc = (size_t)c->n_hc;
	size_t k = (size_t)X4_MAX(1, c->n_expert_used), cw = (size_t)t->cw;
	w->T = t->chunk;
	w->ncoef = c->n_hc * (2 + c->n_hc);
	w->F = X4_MAX(c->n_ff, c->n_ff_exp * X4_MAX(1, c->n_expert_shared));
	struct { REAL **p; size_t n; } bufs[] = {
		{ &w->H, T * hc * D }, { &w->Hn, T * hc * D }, { &w->uh, T * hc * D },
		{ &w->mix, T * (size_t)w->ncoef }, { &w->pre, T * hc }, { &w->post, T * hc },
		{ &w->comb, T * hc * hc }, { &w->x, T * D }, { &w->xh, T * D }, { &w->y, T * D },
		{ &w->cq, T * (size_t)c->q_lora }, { &w->q, T * (size_t)(c->n_head * c->d_qk) },
		{ &w->kva, T * cw }, { &w->qt, T * (size_t)c->n_head * cw },
		{ &w->ob, T * (size_t)(c->n_head * c->kv_lora) },
		{ &w->o, T * (size_t)(c->n_head * c->d_v) },
		{ &w->g, T * (size_t)w->F }, { &w->u, T * (size_t)w->F },
		{ &w->rl, T * (size_t)X4_MAX(1, c->n_expert) }, { &w->sw, T * k },
		{ &w->xe, T * k * D }, { &w->ye, T * k * D },
		{ &w->ge, T * k * (size_t)c->n_ff_exp }, { &w->ue, T * k * (size_t)c->n_ff_exp },
		{ &w->acc, T * D }, { &w->hn, T * D },
		{ &w->rope, T * (size_t)c->d_rope },
		{ &w->logit, REAL_IS_FLOAT ? 1 : T * (size_t)c->n_vocab },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(bufs); i++)
		if (!(*bufs[i].p = x4_alloc(bufs[i].n * sizeof(REAL), "the trunk workspace", e)))
			return X4_ENOMEM;
	w->sel = x4_alloc(T * k * sizeof(int), "the trunk workspace", e);
	w->key = x4_alloc((size_t)X4_MAX(1, c->n_expert) * sizeof(double), "the trunk workspace", e);
	w->cnt = x4_alloc((size_t)(c->n_expert + 2) * sizeof(int), "the trunk workspace", e);
	w->off = x4_alloc((size_t)(c->n_expert + 2) * sizeof(int), "the trunk workspace", e);
	w->rt = x4_alloc(T * k * sizeof(int), "the trunk workspace", e);
	w->rs = x4_alloc(T * k * sizeof(int), "the trunk workspace", e);
	w->probe = x4_alloc((hc * D + 2 * D + hc + hc * hc + k) * sizeof(float), "the probe", e);
	w->probe_sel = x4_alloc(k * sizeof(int), "the probe", e);
	if (!w->sel || !w->key || !w->cnt || !w->off || !w->rt || !w->rs || !w->probe || !w->probe_sel)
		return X4_ENOMEM;
	/* Per worker: a weight row (twice the room in F64 for the widening),
	 * and the attention's scores for every head. */
	for (int i = 0; i < t->nthr; i++) {
		if (!(t->wrow[i] = x4_alloc(t->kmax * sizeof(REAL), "a weight row", e)))
			return X4_ENOMEM;
		size_t na = (size_t)c->n_head * (size_t)t->max_ctx;
		if (!(t->att[i] = x4_alloc(na * sizeof(REAL), "the attention scratch", e)))
			return X4_ENOMEM;
	}
	return 0;
}

/* ---- the hyper-connection (docs/forward.md 5.1, 5.2 A1/F1 and A4/F4) ---- */

static void FN(hc_pre)(x4_trunk_cpu *t, FN(ws) *w, int T, const x4_gguf_tensor *fn,
		       const x4_gguf_tensor *base, const x4_gguf_tensor *scale)
{
	const x4_config *c = t->c;
	int hc = c->n_hc, D = c->n_embd, HD = hc * D;
	for (int tk = 0; tk < T; tk++) {
		const REAL *H = w->H + (size_t)tk * HD;
		REAL *uh = w->uh + (size_t)tk * HD;
		REAL ss = FN(dot)(H, H, HD);
		REAL inv = (REAL)1 / R_SQRT(ss / (REAL)HD + (REAL)c->rms_eps);
		for (int i = 0; i < HD; i++)
			uh[i] = H[i] * inv;
	}
	FN(mm)(t, fn, w->uh, (size_t)HD, T, w->mix, (size_t)w->ncoef);
	for (int tk = 0; tk < T; tk++) {
		REAL *pre = w->pre + tk * hc;
		FN(x4_hc_coef)(c, w->mix + (size_t)tk * w->ncoef, base->data, scale->data, pre,
			       w->post + tk * hc, w->comb + tk * hc * hc);
		const REAL *H = w->H + (size_t)tk * HD;
		REAL *x = w->x + (size_t)tk * D;
		for (int i = 0; i < D; i++) {
			REAL v = 0;
			for (int s = 0; s < hc; s++)
				v += pre[s] * H[s * D + i];
			x[i] = v;
		}
	}
}

/* docs/forward.md 5.2 A4/F4: out[d] = post[d] * y + sum_s C[d][s] * H[s]. */
void FN(x4_hc_update)(int hc, int D, const REAL *post, const REAL *C, const REAL *H,
		      const REAL *y, REAL *out)
{
	for (int d = 0; d < hc; d++)
		for (int i = 0; i < D; i++) {
			REAL mixed = 0;
			for (int s = 0; s < hc; s++)
				mixed += C[d * hc + s] * H[s * D + i];
			out[d * D + i] = post[d] * y[i] + mixed;
		}
}

/* The update, stored at the residual's width (F16/BF16: the earlier
 * runtime's failing configuration, docs/record.md 2, for the walk). */
static void FN(hc_post)(x4_trunk_cpu *t, FN(ws) *w, int T)
{
	const x4_config *c = t->c;
	int hc = c->n_hc, D = c->n_embd, HD = hc * D, resid = t->o.resid;
	for (int tk = 0; tk < T; tk++) {
		REAL *Hn = w->Hn + (size_t)tk * HD;
		FN(x4_hc_update)(hc, D, w->post + tk * hc, w->comb + tk * hc * hc,
				 w->H + (size_t)tk * HD, w->y + (size_t)tk * D, Hn);
		if (resid != X4_RESID_F32)
			for (int i = 0; i < HD; i++)
				Hn[i] = FN(narrow)(resid, Hn[i]);
	}
	REAL *tmp = w->H;
	w->H = w->Hn;
	w->Hn = tmp;
}

/* ---- MLA (docs/forward.md 6), absorbed for prefill and decode alike ---- */

static void FN(rope)(const x4_trunk_cpu *t, REAL *z, const REAL *cs)
{
	for (int i = 0; i < t->c->d_rope / 2; i++) {
		REAL a = z[2 * i], b = z[2 * i + 1], co = cs[2 * i], si = cs[2 * i + 1];
		z[2 * i] = a * co - b * si;
		z[2 * i + 1] = b * co + a * si;
	}
}

struct FN(att_ctx) {
	x4_trunk_cpu *t;
	FN(ws) *w;
	int blk, p0, G, ng;
	REAL scale;
};

static void FN(att_task)(void *arg, int64_t i, int worker)
{
	struct FN(att_ctx) *a = arg;
	x4_trunk_cpu *t = a->t;
	const x4_config *c = t->c;
	int tk = (int)(i / a->ng), h0 = (int)(i % a->ng) * a->G;
	int h1 = X4_MIN(c->n_head, h0 + a->G), n = a->p0 + tk + 1, cw = t->cw;
	size_t mc = (size_t)t->max_ctx;
	REAL *sc = t->att[worker]; /* [G][max_ctx] */
	const REAL *cache = (const REAL *)t->cache + (size_t)a->blk * mc * (size_t)cw;
	const REAL *qt = a->w->qt + (size_t)tk * c->n_head * cw;
	for (int tau = 0; tau < n; tau++) {
		const REAL *cr = cache + (size_t)tau * cw;
		for (int h = h0; h < h1; h++)
			sc[(size_t)(h - h0) * mc + tau] = a->scale * FN(dot)(qt + (size_t)h * cw, cr, cw);
	}
	for (int h = h0; h < h1; h++) {
		REAL *s = sc + (size_t)(h - h0) * mc, mx = -INFINITY, sum = 0;
		for (int tau = 0; tau < n; tau++)
			mx = s[tau] > mx ? s[tau] : mx;
		for (int tau = 0; tau < n; tau++) {
			s[tau] = R_EXP(s[tau] - mx);
			sum += s[tau];
		}
		for (int tau = 0; tau < n; tau++)
			s[tau] /= sum;
		memset(a->w->ob + ((size_t)tk * c->n_head + h) * c->kv_lora, 0,
		       sizeof(REAL) * (size_t)c->kv_lora);
	}
	for (int tau = 0; tau < n; tau++) {
		const REAL *row = cache + (size_t)tau * cw;
		for (int h = h0; h < h1; h++) {
			REAL p = sc[(size_t)(h - h0) * mc + tau];
			REAL *ob = a->w->ob + ((size_t)tk * c->n_head + h) * c->kv_lora;
			for (int j = 0; j < c->kv_lora; j++)
				ob[j] += p * row[j];
		}
	}
}

static void FN(mla)(x4_trunk_cpu *t, FN(ws) *w, int b, int p0, int T)
{
	const x4_config *c = t->c;
	const x4_block_w *bw = &t->m->blk[b];
	int D = c->n_embd, cw = t->cw, nh = c->n_head, dqk = c->d_qk, kvl = c->kv_lora;
	FN(mm_job) ja[2] = {
		{ bw->attn_q_a, 0, c->q_lora, D, T, w->xh, (size_t)D, w->cq, (size_t)c->q_lora },
		{ bw->attn_kv_a_mqa, 0, cw, D, T, w->xh, (size_t)D, w->kva, (size_t)cw },
	};
	x4_prof_op(t->prof, X4_PC_ATTN, "attn_q_a_kv_a",
		   bw->attn_q_a->nbytes + bw->attn_kv_a_mqa->nbytes);
	FN(mm_run)(t, ja, 2);
	x4_prof_op(t->prof, X4_PC_ATTN, "attn_norm_rope_store",
		   bw->attn_q_a_norm->nbytes + bw->attn_kv_a_norm->nbytes);
	for (int tk = 0; tk < T; tk++) {
		REAL *cq = w->cq + (size_t)tk * c->q_lora, *kv = w->kva + (size_t)tk * cw;
		FN(rmsnorm)(cq, cq, bw->attn_q_a_norm->data, c->q_lora, c->rms_eps);
		FN(rmsnorm)(kv, kv, bw->attn_kv_a_norm->data, kvl, c->rms_eps);
		FN(rope)(t, kv + kvl, w->rope + (size_t)tk * c->d_rope);
		REAL *dst = (REAL *)t->cache + ((size_t)b * t->max_ctx + (size_t)(p0 + tk)) * (size_t)cw;
		for (int j = 0; j < cw; j++)
			dst[j] = t->kv16 ? (REAL)x4_f16_to_f32(x4_f32_to_f16((float)kv[j])) : kv[j];
	}
	x4_prof_op(t->prof, X4_PC_ATTN, "attn_q_b", bw->attn_q_b->nbytes);
	FN(mm)(t, bw->attn_q_b, w->cq, (size_t)c->q_lora, T, w->q, (size_t)nh * dqk);
	x4_prof_op(t->prof, X4_PC_ATTN, "attn_rope_absorb_q", bw->attn_k_b->nbytes);
	FN(mm_job) jk[nh];
	for (int h = 0; h < nh; h++) {
		for (int tk = 0; tk < T; tk++) {
			REAL *qr = w->q + ((size_t)tk * nh + h) * dqk + c->d_nope;
			FN(rope)(t, qr, w->rope + (size_t)tk * c->d_rope);
			memcpy(w->qt + ((size_t)tk * nh + h) * cw + kvl, qr, sizeof(REAL) * (size_t)c->d_rope);
		}
		jk[h] = (FN(mm_job)){ bw->attn_k_b, (uint64_t)h * kvl, kvl, c->d_nope, T,
				      w->q + (size_t)h * dqk, (size_t)nh * dqk,
				      w->qt + (size_t)h * cw, (size_t)nh * cw };
	}
	FN(mm_run)(t, jk, nh);
	/* Decode has one token: split its heads so every worker has some. */
	int G = T >= t->nthr ? nh : X4_MAX(1, nh / t->nthr);
	struct FN(att_ctx) a = { t, w, b, p0, G, (nh + G - 1) / G, (REAL)c->kq_scale };
	x4_prof_op_cache(t->prof, X4_PC_ATTN, "attn_attend", (uint64_t)cw * sizeof(REAL), p0 + T);
	x4_pool_run(t->pool, (int64_t)T * a.ng, FN(att_task), &a);
	FN(mm_job) jv[nh];
	for (int h = 0; h < nh; h++)
		jv[h] = (FN(mm_job)){ bw->attn_v_b, (uint64_t)h * c->d_v, c->d_v, kvl, T,
				      w->ob + (size_t)h * kvl, (size_t)nh * kvl,
				      w->o + (size_t)h * c->d_v, (size_t)nh * c->d_v };
	x4_prof_op(t->prof, X4_PC_ATTN, "attn_expand_v", bw->attn_v_b->nbytes);
	FN(mm_run)(t, jv, nh);
	x4_prof_op(t->prof, X4_PC_ATTN, "attn_output", bw->attn_output->nbytes);
	FN(mm)(t, bw->attn_output, w->o, (size_t)nh * c->d_v, T, w->y, (size_t)D);
}

/* ---- FFN (docs/forward.md 7) ---- */

/* silu(g) * u, kept at the trunk's width for the down projection
 * (docs/numerics.md 1.4: this product is what crosses 65504). */
static void FN(swiglu)(REAL *g, const REAL *u, size_t n)
{
	for (size_t i = 0; i < n; i++)
		g[i] = g[i] * FN(sigmoid)(g[i]) * u[i];
}

static void FN(dense)(x4_trunk_cpu *t, FN(ws) *w, int b, int T)
{
	const x4_block_w *bw = &t->m->blk[b];
	int D = t->c->n_embd, F = w->F, nf = (int)bw->ffn_gate->ne[1];
	FN(mm_job) j[2] = {
		{ bw->ffn_gate, 0, nf, D, T, w->xh, (size_t)D, w->g, (size_t)F },
		{ bw->ffn_up, 0, nf, D, T, w->xh, (size_t)D, w->u, (size_t)F },
	};
	x4_prof_op(t->prof, X4_PC_DENSE, "ffn_gate_up", bw->ffn_gate->nbytes + bw->ffn_up->nbytes);
	FN(mm_run)(t, j, 2);
	x4_prof_op(t->prof, X4_PC_DENSE, "ffn_swiglu", 0);
	for (int tk = 0; tk < T; tk++)
		FN(swiglu)(w->g + (size_t)tk * F, w->u + (size_t)tk * F, (size_t)nf);
	x4_prof_op(t->prof, X4_PC_DENSE, "ffn_down", bw->ffn_down->nbytes);
	FN(mm)(t, bw->ffn_down, w->g, (size_t)F, T, w->y, (size_t)D);
}

static void FN(moe)(x4_trunk_cpu *t, FN(ws) *w, int b, int T)
{
	const x4_config *c = t->c;
	const x4_block_w *bw = &t->m->blk[b];
	int D = c->n_embd, E = c->n_expert, k = c->n_expert_used, Fe = c->n_ff_exp, F = w->F;
	const float *bias = bw->exp_probs_b->data;
	x4_prof_op(t->prof, X4_PC_ROUTER, "moe_router",
		   bw->ffn_gate_inp->nbytes + bw->exp_probs_b->nbytes);
	FN(mm)(t, bw->ffn_gate_inp, w->xh, (size_t)D, T, w->rl, (size_t)E);
	memset(w->cnt, 0, sizeof(int) * (size_t)(E + 1));
	for (int tk = 0; tk < T; tk++) {
		REAL *g = w->rl + (size_t)tk * E, *sw = w->sw + tk * k, sum = 0;
		int *sel = w->sel + tk * k;
		for (int e = 0; e < E; e++)
			g[e] = FN(sigmoid)(g[e]);
		FN(topk)(g, bias, w->key, E, k, sel);
		for (int j = 0; j < k; j++)
			sum += g[sel[j]];
		for (int j = 0; j < k; j++) {
			sw[j] = c->expert_norm ? g[sel[j]] / (sum + (REAL)1e-20) : g[sel[j]];
			sw[j] *= (REAL)c->expert_scale;
			w->cnt[sel[j]]++;
		}
	}
	x4_prof_op(t->prof, X4_PC_ROUTER, "moe_route", 0);
	w->off[0] = 0;
	for (int e = 0; e < E; e++)
		w->off[e + 1] = w->off[e] + w->cnt[e];
	int fill[E];
	memcpy(fill, w->off, sizeof fill);
	for (int tk = 0; tk < T; tk++)
		for (int j = 0; j < k; j++) {
			int r = fill[w->sel[tk * k + j]]++;
			w->rt[r] = tk;
			w->rs[r] = j;
			memcpy(w->xe + (size_t)r * D, w->xh + (size_t)tk * D, sizeof(REAL) * (size_t)D);
		}
	bool sh = bw->ffn_gate_shexp != NULL;
	int nsh = sh ? (int)bw->ffn_gate_shexp->ne[1] : 0;
	FN(mm_job) j1[2 * E + 2], j2[E + 1];
	int n1 = 0, n2 = 0;
	for (int e = 0; e < E; e++) {
		if (!w->cnt[e])
			continue;
		size_t o = (size_t)w->off[e];
		j1[n1++] = (FN(mm_job)){ bw->ffn_gate_exps, (uint64_t)e * Fe, Fe, D, w->cnt[e],
					 w->xe + o * D, (size_t)D, w->ge + o * Fe, (size_t)Fe };
		j1[n1++] = (FN(mm_job)){ bw->ffn_up_exps, (uint64_t)e * Fe, Fe, D, w->cnt[e],
					 w->xe + o * D, (size_t)D, w->ue + o * Fe, (size_t)Fe };
		j2[n2++] = (FN(mm_job)){ bw->ffn_down_exps, (uint64_t)e * D, D, Fe, w->cnt[e],
					 w->ge + o * Fe, (size_t)Fe, w->ye + o * D, (size_t)D };
	}
	if (sh) {
		j1[n1++] = (FN(mm_job)){ bw->ffn_gate_shexp, 0, nsh, D, T, w->xh, (size_t)D, w->g,
					 (size_t)F };
		j1[n1++] = (FN(mm_job)){ bw->ffn_up_shexp, 0, nsh, D, T, w->xh, (size_t)D, w->u,
					 (size_t)F };
		j2[n2++] = (FN(mm_job)){ bw->ffn_down_shexp, 0, D, nsh, T, w->g, (size_t)F, w->y,
					 (size_t)D };
	}
	/* Profiled, the shared expert's products are dispatched apart so that
	 * they are timed apart (the split never changes a result). */
	int used = n2 - sh, n1r = n1 - 2 * sh;
	bool split = t->prof && sh;
	x4_prof_op(t->prof, X4_PC_EXPERTS, "moe_experts_gate_up",
		   (bw->ffn_gate_exps->nbytes + bw->ffn_up_exps->nbytes) / (uint64_t)E * (uint64_t)used);
	FN(mm_run)(t, j1, split ? n1r : n1);
	if (split) {
		x4_prof_op(t->prof, X4_PC_SHARED, "ffn_gate_up",
			   bw->ffn_gate_shexp->nbytes + bw->ffn_up_shexp->nbytes);
		FN(mm_run)(t, j1 + n1r, 2);
	}
	x4_prof_op(t->prof, X4_PC_EXPERTS, "moe_experts_swiglu", 0);
	FN(swiglu)(w->ge, w->ue, (size_t)w->off[E] * Fe);
	if (sh)
		x4_prof_op(t->prof, X4_PC_SHARED, "ffn_swiglu", 0);
	for (int tk = 0; sh && tk < T; tk++)
		FN(swiglu)(w->g + (size_t)tk * F, w->u + (size_t)tk * F, (size_t)nsh);
	x4_prof_op(t->prof, X4_PC_EXPERTS, "moe_experts_down",
		   bw->ffn_down_exps->nbytes / (uint64_t)E * (uint64_t)used);
	FN(mm_run)(t, j2, split ? n2 - 1 : n2);
	if (split) {
		x4_prof_op(t->prof, X4_PC_SHARED, "ffn_down", bw->ffn_down_shexp->nbytes);
		FN(mm_run)(t, j2 + n2 - 1, 1);
	}
	x4_prof_op(t->prof, X4_PC_EXPERTS, "moe_sum", 0);
	/* Routed terms in ascending expert id (docs/forward.md 7.3), then the shared one. */
	memset(w->acc, 0, sizeof(REAL) * (size_t)T * D);
	for (int r = 0; r < w->off[E]; r++) {
		REAL *acc = w->acc + (size_t)w->rt[r] * D, sw = w->sw[w->rt[r] * k + w->rs[r]];
		const REAL *ye = w->ye + (size_t)r * D;
		for (int i = 0; i < D; i++)
			acc[i] += sw * ye[i];
	}
	for (size_t i = 0; i < (size_t)T * D; i++)
		w->y[i] = sh ? w->acc[i] + w->y[i] : w->acc[i];
}

/* ---- the probe, the head and the loop ---- */

static void FN(probe)(x4_trunk_cpu *t, FN(ws) *w, int b, int sub, int tk)
{
	const x4_config *c = t->c;
	int hc = c->n_hc, D = c->n_embd, k = c->n_expert_used;
	x4_probe_row r = { .block = b, .sublayer = sub };
	bool moe = sub == 1 && t->m->blk[b].moe;
#if REAL_IS_FLOAT
	r.streams = w->H + (size_t)tk * hc * D;
	r.sub_out = w->y + (size_t)tk * D;
	r.sub_in = w->xh + (size_t)tk * D;
	r.post = w->post + tk * hc;
	r.comb = w->comb + tk * hc * hc;
	r.expert_w = moe ? w->sw + tk * k : NULL;
#else
	float *f = w->probe;
	const REAL *src[] = { w->H + (size_t)tk * hc * D, w->y + (size_t)tk * D,
			      w->xh + (size_t)tk * D, w->post + tk * hc, w->comb + tk * hc * hc,
			      w->sw + tk * k };
	size_t len[] = { (size_t)hc * D, (size_t)D, (size_t)D, (size_t)hc, (size_t)hc * hc,
			 (size_t)k };
	const float **dst[] = { &r.streams, &r.sub_out, &r.sub_in, &r.post, &r.comb, &r.expert_w };
	for (int i = 0; i < 6; i++) {
		for (size_t j = 0; j < len[i]; j++)
			f[j] = (float)src[i][j];
		*dst[i] = f;
		f += len[i];
	}
	if (!moe)
		r.expert_w = NULL;
#endif
	r.experts = moe ? w->sel + tk * k : NULL;
	t->probe(t->probe_ctx, &r);
}

static void FN(head)(x4_trunk_cpu *t, FN(ws) *w, int tk0, int T, float *logits)
{
	const x4_config *c = t->c;
	int hc = c->n_hc, D = c->n_embd, V = c->n_vocab;
	x4_prof_op(t->prof, X4_PC_HEAD, "head_norm", t->m->output_norm->nbytes);
	for (int tk = 0; tk < T; tk++) {
		const REAL *H = w->H + (size_t)(tk0 + tk) * hc * D;
		REAL *hb = w->x + (size_t)tk * D;
		for (int i = 0; i < D; i++) {
			REAL v = 0;
			for (int s = 0; s < hc; s++)
				v += H[s * D + i];
			hb[i] = v * ((REAL)1 / (REAL)hc);
		}
		FN(rmsnorm)(w->hn + (size_t)tk * D, hb, t->m->output_norm->data, D, c->rms_eps);
	}
	x4_prof_op(t->prof, X4_PC_HEAD, "head_logits", t->m->output->nbytes);
#if REAL_IS_FLOAT
	FN(mm)(t, t->m->output, w->hn, (size_t)D, T, logits, (size_t)V);
#else
	FN(mm)(t, t->m->output, w->hn, (size_t)D, T, w->logit, (size_t)V);
	for (size_t i = 0; i < (size_t)T * V; i++)
		logits[i] = (float)w->logit[i];
#endif
}

void FN(x4_cpu_forward)(x4_trunk_cpu *t, const int32_t *ids, int n, float *logits, bool all)
{
	const x4_config *c = t->c;
	FN(ws) *w = t->ws;
	int hc = c->n_hc, D = c->n_embd, half = c->d_rope / 2;
	for (int done = 0; done < n; done += w->T) {
		int T = X4_MIN(w->T, n - done), p0 = t->pos + done;
		bool last = done + T == n;
		x4_prof_op(t->prof, X4_PC_EMBED, "embed",
			   t->m->token_embd->nbytes / (uint64_t)c->n_vocab * (uint64_t)T);
		for (int tk = 0; tk < T; tk++) {
			const REAL *e = FN(row)(t, 0, t->m->token_embd, (uint64_t)ids[done + tk]);
			REAL *H = w->H + (size_t)tk * hc * D;
			for (int s = 0; s < hc; s++)
				for (int i = 0; i < D; i++)
					H[s * D + i] = FN(narrow)(t->o.resid, e[i]);
			/* theta = fl32(fl32(p) * fl32(omega)), then an accurate
			 * cos/sin (docs/forward.md 6.2). */
			for (int i = 0; i < half; i++) {
				float th = (float)(p0 + tk) * t->omega[i];
				w->rope[(size_t)tk * c->d_rope + 2 * i] = (REAL)cos((double)th);
				w->rope[(size_t)tk * c->d_rope + 2 * i + 1] = (REAL)sin((double)th);
			}
		}
		bool probe = last && t->probe;
		for (int b = 0; b < c->n_block; b++) {
			const x4_block_w *bw = &t->m->blk[b];
			x4_prof_op(t->prof, X4_PC_HC, "hc_attn_gate", bw->hc_attn_fn->nbytes);
			FN(hc_pre)(t, w, T, bw->hc_attn_fn, bw->hc_attn_base, bw->hc_attn_scale);
			x4_prof_op(t->prof, X4_PC_NORM, "attn_norm", bw->attn_norm->nbytes);
			for (int tk = 0; tk < T; tk++)
				FN(rmsnorm)(w->xh + (size_t)tk * D, w->x + (size_t)tk * D,
					    bw->attn_norm->data, D, c->rms_eps);
			FN(narrow_sub)(t, w->xh, (size_t)T * D);
			FN(mla)(t, w, b, p0, T);
			x4_prof_op(t->prof, X4_PC_HC, "hc_update", 0);
			FN(hc_post)(t, w, T);
			if (probe)
				FN(probe)(t, w, b, 0, T - 1);
			x4_prof_op(t->prof, X4_PC_HC, "hc_ffn_gate", bw->hc_ffn_fn->nbytes);
			FN(hc_pre)(t, w, T, bw->hc_ffn_fn, bw->hc_ffn_base, bw->hc_ffn_scale);
			x4_prof_op(t->prof, X4_PC_NORM, "ffn_norm", bw->ffn_norm->nbytes);
			for (int tk = 0; tk < T; tk++)
				FN(rmsnorm)(w->xh + (size_t)tk * D, w->x + (size_t)tk * D,
					    bw->ffn_norm->data, D, c->rms_eps);
			FN(narrow_sub)(t, w->xh, (size_t)T * D);
			if (bw->moe)
				FN(moe)(t, w, b, T);
			else
				FN(dense)(t, w, b, T);
			x4_prof_op(t->prof, X4_PC_HC, "hc_update", 0);
			FN(hc_post)(t, w, T);
			if (probe)
				FN(probe)(t, w, b, 1, T - 1);
		}
		if (logits && all)
			FN(head)(t, w, 0, T, logits + (size_t)done * c->n_vocab);
		else if (logits && last)
			FN(head)(t, w, T - 1, 1, logits);
	}
	x4_prof_end(t->prof);
}

#undef LANES
