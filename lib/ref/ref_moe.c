/*
 * ref_moe.c - the plain-C references of the MoE (docs/forward.md 7.2, 7.3;
 * x4_kern.h section 3): the router and the routed experts, in double.  The
 * experts are walked in ascending id, the order docs/forward.md 7.3 sums
 * them in.
 */
#include "x4_int.h"
#include "x4_kern.h"

#include <math.h>

static bool taken_before(const int *sel, int j, int e)
{
	for (int q = 0; q < j; q++)
		if (sel[q] == e)
			return true;
	return false;
}

void x4r_topk(const double *v, int n, int k, int *sel)
{
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int e = 0; e < n; e++) /* ascending, strict >: the lower index keeps a tie */
			if (!isnan(v[e]) && !taken_before(sel, j, e) && (best < 0 || v[e] > v[best]))
				best = e;
		for (int e = 0; best < 0 && e < n; e++) /* only NaN left */
			if (!taken_before(sel, j, e))
				best = e;
		sel[j] = best;
	}
}

int x4r_moe_router(int n_tok, int d, int n_expert, int k, const float *x,
		   const float *w_r, const float *bias, float scale, bool norm,
		   int32_t *sel, float *wts, float *score, float *lmag, x4_err *e)
{
	if (n_tok < 0 || d <= 0 || n_expert <= 0 || k <= 0 || k > n_expert)
		return x4_err_set(e, X4_EINVAL, "ref router: bad shape tokens %d d %d experts %d k %d",
				  n_tok, d, n_expert, k);
	double *g = x4_alloc((size_t)n_expert * 2 * sizeof *g, "ref router scores", e);
	if (!g)
		return X4_ENOMEM;
	double *sb = g + n_expert; /* [n_expert] g + bias: what selection ranks */
	int *pick = x4_alloc((size_t)k * sizeof *pick, "ref router picks", e);
	if (!pick) {
		free(g);
		return X4_ENOMEM;
	}
	for (int t = 0; t < n_tok; t++) {
		const float *xt = x + (size_t)t * d;
		for (int ex = 0; ex < n_expert; ex++) {
			double l = 0, m = 0;
			for (int c = 0; c < d; c++) {
				double p = (double)w_r[(size_t)ex * d + c] * (double)xt[c];
				l += p;
				m += fabs(p);
			}
			g[ex] = 1.0 / (1.0 + exp(-l));
			sb[ex] = g[ex] + (double)bias[ex];
			if (score)
				score[(size_t)t * n_expert + ex] = (float)sb[ex];
			if (lmag)
				lmag[(size_t)t * n_expert + ex] = (float)m;
		}
		int32_t *st = sel + (size_t)t * k;
		x4r_topk(sb, n_expert, k, pick);
		double sum = 0;
		for (int s = 0; s < k; s++) {
			st[s] = pick[s];
			sum += g[pick[s]];
		}
		for (int s = 0; s < k; s++) {
			double gs = g[sel[(size_t)t * k + s]];
			wts[(size_t)t * k + s] = (float)(norm ? gs / (sum + 1e-20) * scale : gs * scale);
		}
	}
	free(pick);
	free(g);
	return 0;
}

/* One expert's work, shared with the row tasks. */
struct moe_job {
	int type, d, f, nr;
	size_t rb_d, rb_f;           /* bytes of a row of d and of f values */
	const uint8_t *wg, *wu, *wd; /* this expert's three matrices */
	float *g, *u, *dn;           /* dequantized: [f][d], [f][d], [d][f] */
	const float *x;
	const int *tok;              /* [nr] token of each route of the expert */
	const float *w;              /* [nr] its weight */
	double *h, *mh;              /* [nr][f] SwiGLU product and its error scale */
	double *y, *my;              /* [n_tok][d] accumulators */
	int phase, failed;
};

#define REF_ROWS 32

static void moe_rows(void *arg, int64_t task)
{
	struct moe_job *j = arg;
	int r0 = (int)task * REF_ROWS;
	if (j->phase == 0) { /* dequantize rows r0.. of the three matrices */
		for (int r = r0; r < X4_MIN(j->f, r0 + REF_ROWS); r++)
			if (x4_dequant(j->type, j->wg + r * j->rb_d, j->g + (size_t)r * j->d, j->d, NULL) ||
			    x4_dequant(j->type, j->wu + r * j->rb_d, j->u + (size_t)r * j->d, j->d, NULL))
				__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
		for (int r = r0; r < X4_MIN(j->d, r0 + REF_ROWS); r++)
			if (x4_dequant(j->type, j->wd + r * j->rb_f, j->dn + (size_t)r * j->f, j->f, NULL))
				__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
	} else if (j->phase == 1) { /* gate, up and the SwiGLU product, rows of f */
		for (int r = r0; r < X4_MIN(j->f, r0 + REF_ROWS); r++) {
			const float *gr = j->g + (size_t)r * j->d, *ur = j->u + (size_t)r * j->d;
			for (int i = 0; i < j->nr; i++) {
				const float *x = j->x + (size_t)j->tok[i] * j->d;
				double ga = 0, gm = 0, ua = 0, um = 0;
				for (int c = 0; c < j->d; c++) {
					double pg = (double)gr[c] * x[c], pu = (double)ur[c] * x[c];
					ga += pg;
					gm += fabs(pg);
					ua += pu;
					um += fabs(pu);
				}
				double sg = 1.0 / (1.0 + exp(-ga)), silu = ga * sg;
				double dsilu = sg * (1.0 + ga * (1.0 - sg));
				double h = silu * ua;
				j->h[(size_t)i * j->f + r] = h;
				j->mh[(size_t)i * j->f + r] = fabs(dsilu * ua) * gm + fabs(silu) * um + fabs(h);
			}
		}
	} else { /* down, rows of d, weighted into the accumulators */
		for (int r = r0; r < X4_MIN(j->d, r0 + REF_ROWS); r++) {
			const float *dr = j->dn + (size_t)r * j->f;
			for (int i = 0; i < j->nr; i++) {
				const double *h = j->h + (size_t)i * j->f, *mh = j->mh + (size_t)i * j->f;
				double a = 0, m = 0;
				for (int c = 0; c < j->f; c++) {
					a += (double)dr[c] * h[c];
					m += fabs((double)dr[c]) * mh[c];
				}
				j->y[(size_t)j->tok[i] * j->d + r] += (double)j->w[i] * a;
				j->my[(size_t)j->tok[i] * j->d + r] += fabs((double)j->w[i]) * m;
			}
		}
	}
}

int x4r_moe_experts(int type, int n_tok, int d, int f, int n_expert, int k,
		    const float *x, const void *gate, const void *up,
		    const void *down, const int32_t *sel, const float *wts,
		    const float *shared, float *y, float *mag, x4_err *e)
{
	if (!x4_type_known(type) || n_tok < 0 || d <= 0 || f <= 0 || n_expert <= 0 || k <= 0 ||
	    d % x4_type_block_elems(type) || f % x4_type_block_elems(type))
		return x4_err_set(e, X4_EINVAL, "ref experts: bad shape %s d %d f %d experts %d k %d",
				  x4_type_name(type), d, f, n_expert, k);
	struct moe_job j = {
		.type = type, .d = d, .f = f, .x = x,
		.rb_d = (size_t)x4_type_bytes(type, (uint64_t)d),
		.rb_f = (size_t)x4_type_bytes(type, (uint64_t)f),
	};
	size_t nroute = (size_t)n_tok * k;
	j.g = x4_alloc(((size_t)f * d * 3) * sizeof(float), "ref experts weights", e);
	j.h = x4_alloc((nroute * f * 2 + (size_t)n_tok * d * 2) * sizeof(double), "ref experts work", e);
	int *tok = x4_alloc(nroute * sizeof *tok + 1, "ref experts routes", e);
	float *w = x4_alloc(nroute * sizeof *w + 1, "ref experts route weights", e);
	if (!j.g || !j.h || !tok || !w) {
		free(j.g), free(j.h), free(tok), free(w);
		return X4_ENOMEM;
	}
	j.u = j.g + (size_t)f * d;
	j.dn = j.u + (size_t)f * d;
	j.mh = j.h + nroute * f;
	j.y = j.mh + nroute * f;
	j.my = j.y + (size_t)n_tok * d;
	memset(j.y, 0, (size_t)n_tok * d * 2 * sizeof(double));
	j.tok = tok;
	j.w = w;
	int64_t tasks = (X4_MAX(d, f) + REF_ROWS - 1) / REF_ROWS;
	for (int ex = 0; ex < n_expert; ex++) {
		j.nr = 0;
		for (size_t i = 0; i < nroute; i++)
			if (sel[i] == ex) {
				tok[j.nr] = (int)(i / k);
				w[j.nr++] = wts[i];
			}
		if (!j.nr)
			continue;
		j.wg = (const uint8_t *)gate + (size_t)ex * f * j.rb_d;
		j.wu = (const uint8_t *)up + (size_t)ex * f * j.rb_d;
		j.wd = (const uint8_t *)down + (size_t)ex * d * j.rb_f;
		for (j.phase = 0; j.phase < 3; j.phase++)
			x4_parallel_for(tasks, 0, moe_rows, &j);
	}
	for (size_t i = 0; i < (size_t)n_tok * d; i++) {
		double s = shared ? (double)shared[i] : 0.0;
		y[i] = (float)(j.y[i] + s);
		if (mag)
			mag[i] = (float)(j.my[i] + fabs(s));
	}
	int failed = j.failed;
	free(j.g), free(j.h), free(tok), free(w);
	if (failed)
		return x4_err_set(e, X4_EINVAL, "ref experts: dequantization failed");
	return 0;
}
