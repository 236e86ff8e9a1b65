/*
 * ref_hc.c - plain-C references of the hyper-connection gate and the stream
 * update (docs/forward.md 5.1, 5.2), in double, for x4k_hc_pre and x4k_hc_post.
 */
#include "trunk_int.h"
#include "x4_kern.h"

#include <math.h>

/* docs/forward.md 5.2 A4/F4 for one token: out[d] = post[d] * y + sum_s C[d][s] H[s]. */
static void update(int n, int D, const float *coef, const float *y, const float *H, double *out)
{
	for (int d = 0; d < n; d++)
		for (int i = 0; i < D; i++) {
			double mixed = 0;
			for (int s = 0; s < n; s++)
				mixed += (double)coef[2 * n + d * n + s] * H[(size_t)s * D + i];
			out[(size_t)d * D + i] = (double)coef[n + d] * y[i] + mixed;
		}
}

void x4r_hc_post(const x4k_hc_cfg *c, int n_tok, const float *coef, const float *y,
		 const float *H, float *H_out)
{
	int n = c->n_hc, D = c->D, nc = X4K_HC_NCOEF(n);
	size_t K = (size_t)n * D;
	double *o = malloc(sizeof *o * K); /* [n_hc][D] */
	if (!o)
		return;
	for (int t = 0; t < n_tok; t++) {
		update(n, D, coef + (size_t)t * nc, y + (size_t)t * D, H + t * K, o);
		for (size_t i = 0; i < K; i++)
			H_out[t * K + i] = (float)o[i];
	}
	free(o);
}

void x4r_hc_pre(const x4k_hc_cfg *c, int n_tok, const float *H, const uint16_t *fn,
		const float *base, const float *scale, const float *y_prev,
		const float *coef_prev, float *H_out, float *x, float *coef, float *x_mag)
{
	int n = c->n_hc, D = c->D, nc = X4K_HC_NCOEF(n);
	size_t K = (size_t)n * D;
	double *h = malloc(sizeof *h * K); /* [n_hc][D] the state the gate sees */
	if (!h)
		return;
	const x4_config hc_config = {
		.n_hc = n, .sinkhorn_iters = c->iters, .hc_eps = c->hc_eps,
		.clamp_min = c->clamp_min, .clamp_max = c->clamp_max,
	};
	for (int t = 0; t < n_tok; t++) {
		const float *Ht = H + t * K;
		if (y_prev) {
			update(n, D, coef_prev + (size_t)t * nc, y_prev + (size_t)t * D, Ht, h);
			for (size_t i = 0; i < K; i++)
				H_out[t * K + i] = (float)h[i];
		} else {
			for (size_t i = 0; i < K; i++)
				h[i] = Ht[i];
		}
		double ss = 0;
		for (size_t i = 0; i < K; i++)
			ss += h[i] * h[i];
		double inv = 1.0 / sqrt(ss / (double)K + (double)c->rms_eps);
		double m[X4K_HC_NCOEF(8)];
		for (int r = 0; r < nc; r++) {
			double acc = 0;
			for (size_t i = 0; i < K; i++)
				acc += (double)x4_bf16_to_f32(fn[r * K + i]) * (h[i] * inv);
			m[r] = acc;
		}
		/* The coefficients are the F64 CPU trunk's own (one Sinkhorn in C). */
		float *cf = coef + (size_t)t * nc;
		double pre[8], post[8], comb[64];
		x4_hc_coef_f64(&hc_config, m, base, scale, pre, post, comb);
		for (int s = 0; s < n; s++)
			cf[s] = (float)pre[s];
		for (int d = 0; d < n; d++)
			cf[n + d] = (float)post[d];
		for (int i = 0; i < n * n; i++)
			cf[2 * n + i] = (float)comb[i];
		for (int i = 0; i < D; i++) {
			double v = 0, mg = 0;
			for (int s = 0; s < n; s++) {
				v += pre[s] * h[(size_t)s * D + i];
				mg += fabs(pre[s] * h[(size_t)s * D + i]);
			}
			x[(size_t)t * D + i] = (float)v;
			if (x_mag)
				x_mag[(size_t)t * D + i] = (float)mg;
		}
	}
	free(h);
}
