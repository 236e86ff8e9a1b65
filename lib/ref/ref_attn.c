/*
 * ref_attn.c - plain-C references of the MLA pieces (docs/forward.md 6): RoPE, the
 * cache row, the two per-head BF16 products and the absorbed attention, in
 * double.  The attention spreads (token, head) pairs over the CPUs because
 * a 32768-row context would take seconds on one.
 */
#include "x4_int.h"
#include "x4_kern.h"

#include <math.h>

/* fl32(fl32(p) * omega), then cos/sin in double (docs/forward.md 10.3). */
static void rope_pair(float a, float b, int p, float omega, double *oa, double *ob)
{
	float th = (float)p * omega;
	double cs = cos((double)th), sn = sin((double)th);
	*oa = a * cs - b * sn;
	*ob = b * cs + a * sn;
}

void x4r_rope(int n_tok, int n_vec, int d_rope, const float *in, long ld_in_tok,
	      int ld_in_vec, float *out, long ld_out_tok, int ld_out_vec, const float *omega,
	      int pos)
{
	for (int t = 0; t < n_tok; t++)
		for (int v = 0; v < n_vec; v++)
			for (int i = 0; i < d_rope / 2; i++) {
				const float *z = in + t * ld_in_tok + (long)v * ld_in_vec;
				float *o = out + t * ld_out_tok + (long)v * ld_out_vec;
				double a, b;
				rope_pair(z[2 * i], z[2 * i + 1], pos + t, omega[i], &a, &b);
				o[2 * i] = (float)a;
				o[2 * i + 1] = (float)b;
			}
}

void x4r_kv_store(int n_tok, int kv_lora, int d_rope, const float *kva, const float *gain,
		  float eps, const float *omega, int pos, uint16_t *cache, int max_ctx)
{
	int cw = kv_lora + d_rope;
	for (int t = 0; t < n_tok; t++) {
		int p = pos + t;
		if (p < 0 || p >= max_ctx)
			continue;
		const float *a = kva + (size_t)t * cw;
		uint16_t *row = cache + (size_t)p * cw;
		double ss = 0;
		for (int i = 0; i < kv_lora; i++)
			ss += (double)a[i] * a[i];
		double inv = 1.0 / sqrt(ss / kv_lora + (double)eps);
		for (int i = 0; i < kv_lora; i++)
			row[i] = x4_f32_to_f16((float)(a[i] * inv * (gain ? (double)gain[i] : 1.0)));
		for (int i = 0; i < d_rope / 2; i++) {
			double x, y;
			rope_pair(a[kv_lora + 2 * i], a[kv_lora + 2 * i + 1], p, omega[i], &x, &y);
			row[kv_lora + 2 * i] = x4_f32_to_f16((float)x);
			row[kv_lora + 2 * i + 1] = x4_f32_to_f16((float)y);
		}
	}
}

void x4r_mla_absorb_q(int n_tok, int n_head, int kv_lora, int d_nope, int d_rope,
		      const uint16_t *w_kb, const float *q, float *qt)
{
	int dqk = d_nope + d_rope, cw = kv_lora + d_rope;
	for (int t = 0; t < n_tok; t++)
		for (int h = 0; h < n_head; h++)
			for (int c = 0; c < kv_lora; c++) {
				const uint16_t *w = w_kb + ((size_t)h * kv_lora + c) * d_nope;
				const float *qn = q + ((size_t)t * n_head + h) * dqk;
				double acc = 0;
				for (int k = 0; k < d_nope; k++)
					acc += (double)x4_bf16_to_f32(w[k]) * qn[k];
				qt[((size_t)t * n_head + h) * cw + c] = (float)acc;
			}
}

void x4r_mla_expand_v(int n_tok, int n_head, int kv_lora, int d_v, const uint16_t *w_vb,
		      const float *ob, float *o)
{
	for (int t = 0; t < n_tok; t++)
		for (int h = 0; h < n_head; h++)
			for (int j = 0; j < d_v; j++) {
				const uint16_t *w = w_vb + ((size_t)h * d_v + j) * kv_lora;
				const float *x = ob + ((size_t)t * n_head + h) * kv_lora;
				double acc = 0;
				for (int c = 0; c < kv_lora; c++)
					acc += (double)x4_bf16_to_f32(w[c]) * x[c];
				o[((size_t)t * n_head + h) * d_v + j] = (float)acc;
			}
}

struct attn_job {
	int n_head, kv_lora, cw, max_ctx, pos;
	float scale;
	const float *qt;
	const uint16_t *cache;
	float *ob, *mag;
	double *smax; /* [n_tok * n_head] each pair's largest |score| */
	int failed;
};

static void attn_one(void *arg, int64_t i)
{
	struct attn_job *j = arg;
	int t = (int)(i / j->n_head), cw = j->cw, kvl = j->kv_lora;
	int len = j->pos + t + 1;
	len = len > j->max_ctx ? j->max_ctx : len;
	double *s = malloc(sizeof *s * (size_t)(len > 0 ? len : 1)); /* [len] scores */
	double *o = calloc((size_t)kvl * 2, sizeof *o);              /* [2][kv_lora] */
	if (!s || !o) {
		__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
		free(s);
		free(o);
		return;
	}
	const float *q = j->qt + (size_t)i * cw;
	double mx = -INFINITY, sm = 0, amax = 0;
	for (int tau = 0; tau < len; tau++) {
		const uint16_t *row = j->cache + (size_t)tau * cw;
		double acc = 0;
		for (int c = 0; c < cw; c++)
			acc += (double)q[c] * x4_f16_to_f32(row[c]);
		s[tau] = j->scale * acc;
		mx = s[tau] > mx ? s[tau] : mx;
		amax = fabs(s[tau]) > amax ? fabs(s[tau]) : amax;
	}
	for (int tau = 0; tau < len; tau++) {
		s[tau] = exp(s[tau] - mx);
		sm += s[tau];
	}
	for (int tau = 0; tau < len; tau++) {
		const uint16_t *row = j->cache + (size_t)tau * cw;
		for (int c = 0; c < kvl; c++) {
			double v = x4_f16_to_f32(row[c]);
			o[c] += s[tau] * v;
			o[kvl + c] += s[tau] * fabs(v);
		}
	}
	for (int c = 0; c < kvl; c++) {
		j->ob[(size_t)i * kvl + c] = len > 0 ? (float)(o[c] / sm) : 0.f;
		if (j->mag)
			j->mag[(size_t)i * kvl + c] = len > 0 ? (float)(o[kvl + c] / sm) : 0.f;
	}
	j->smax[i] = amax;
	free(s);
	free(o);
}

void x4r_mla_attn(int n_tok, int n_head, int kv_lora, int d_rope, const float *qt,
		  const uint16_t *cache, int max_ctx, int pos, float kq_scale, float *ob,
		  float *mag, double *smax)
{
	double *sm = calloc((size_t)n_tok * n_head, sizeof *sm); /* [n_tok][n_head] */
	if (!sm)
		return;
	struct attn_job j = { n_head, kv_lora, kv_lora + d_rope, max_ctx, pos, kq_scale,
			      qt, cache, ob, mag, sm, 0 };
	x4_parallel_for((int64_t)n_tok * n_head, 0, attn_one, &j);
	if (smax) {
		*smax = 0;
		for (size_t i = 0; i < (size_t)n_tok * n_head; i++)
			*smax = sm[i] > *smax ? sm[i] : *smax;
	}
	free(sm);
}
