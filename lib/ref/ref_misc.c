/*
 * ref_misc.c - plain-C references of the embedding, RMSNorm, head and
 * sampling kernels (x4_kern.h section 2): the obvious loops, double sums.
 */
#include "x4_int.h"
#include "x4_kern.h"

#include <math.h>

void x4r_embed(const uint16_t *emb, int n_vocab, int D, int n_hc, const int32_t *ids,
	       int n_tok, float *H)
{
	for (int t = 0; t < n_tok; t++)
		for (int s = 0; s < n_hc; s++)
			for (int i = 0; i < D; i++)
				H[((size_t)t * n_hc + s) * D + i] =
					ids[t] >= 0 && ids[t] < n_vocab
						? x4_bf16_to_f32(emb[(size_t)ids[t] * D + i]) : NAN;
}

static void rms_row(int n, const double *x, const float *gain, float eps, float *y)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	double inv = 1.0 / sqrt(ss / n + (double)eps);
	for (int i = 0; i < n; i++)
		y[i] = (float)(x[i] * inv * (gain ? (double)gain[i] : 1.0));
}

void x4r_rmsnorm(int n_tok, int n, const float *x, int ld_x, const float *gain, float eps,
		 float *y, int ld_y)
{
	double *row = malloc(sizeof *row * (size_t)n); /* [n] */
	if (!row)
		return;
	for (int t = 0; t < n_tok; t++) {
		for (int i = 0; i < n; i++)
			row[i] = x[(size_t)t * ld_x + i];
		rms_row(n, row, gain, eps, y + (size_t)t * ld_y);
	}
	free(row);
}

void x4r_head(int n_tok, int n_hc, int D, const float *H, const float *gain, float eps,
	      float *y)
{
	double *row = malloc(sizeof *row * (size_t)D); /* [D] the mean of the streams */
	if (!row)
		return;
	for (int t = 0; t < n_tok; t++) {
		for (int i = 0; i < D; i++) {
			double v = 0;
			for (int s = 0; s < n_hc; s++)
				v += H[((size_t)t * n_hc + s) * D + i];
			row[i] = v / n_hc;
		}
		rms_row(D, row, gain, eps, y + (size_t)t * D);
	}
	free(row);
}

int32_t x4r_argmax(int n_vocab, const float *l)
{
	int32_t best = -1;
	for (int i = 0; i < n_vocab; i++)
		if (!isnan(l[i]) && (best < 0 || l[i] > l[best]))
			best = i;
	return best < 0 ? 0 : best;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

double x4r_rng_uniform(uint64_t seed, uint64_t counter)
{
	uint64_t h = mix64(mix64(seed) + counter * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull);
	return (double)(h >> 11) * 0x1.0p-53;
}

/* The order-preserving key of z the kernel's radix select uses. */
static uint32_t z_key(float z)
{
	uint32_t b;
	memcpy(&b, &z, sizeof b);
	return b & 0x80000000u ? ~b : b | 0x80000000u;
}

static int cmp_desc_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

struct kw {
	uint32_t key;
	uint64_t w;
};

static int cmp_kw(const void *a, const void *b)
{
	const struct kw *x = a, *y = b;
	return x->key < y->key ? 1 : x->key > y->key ? -1 : 0;
}

#define FIX 1099511627776.0f /* 2^40: the kernel's fixed point */

size_t x4r_sample_scratch_bytes(int n_vocab)
{
	return (size_t)(n_vocab > 0 ? n_vocab : 1) *
	       (sizeof(uint32_t) + sizeof(struct kw) + sizeof(float));
}

int32_t x4r_sample_ws(int n_vocab, const float *logits, float temperature, int top_k,
		      float top_p, uint64_t seed, uint64_t counter, unsigned char *kept,
		      void *scratch)
{
	if (temperature == 0 || top_k == 1) {
		int32_t id = x4r_argmax(n_vocab, logits);
		if (kept) {
			memset(kept, 0, (size_t)n_vocab);
			kept[id] = 1;
		}
		return id;
	}
	struct kw *kw = scratch;                                   /* [n_vocab] */
	uint32_t *keys = (uint32_t *)(kw + n_vocab);                /* [n_vocab] */
	float *z = (float *)(keys + n_vocab);                       /* [n_vocab] */
	float mx = -INFINITY;
	int nv = 0;
	for (int i = 0; i < n_vocab; i++) {
		z[i] = logits[i] / temperature;
		if (!isnan(z[i])) {
			mx = z[i] > mx ? z[i] : mx;
			keys[nv++] = z_key(z[i]);
		}
	}
	/* A largest z that is not finite (an infinite logit, every logit -inf,
	 * or a temperature so small that logit / T overflows) leaves no
	 * softmax: the pick is certain, the argmax of the logits. */
	if (!isfinite(mx)) {
		int32_t id = x4r_argmax(n_vocab, logits);
		if (kept) {
			memset(kept, 0, (size_t)n_vocab);
			kept[id] = 1;
		}
		return id;
	}
	uint32_t kmin = 0;
	if (top_k > 0 && top_k < nv) {
		qsort(keys, (size_t)nv, sizeof *keys, cmp_desc_u32);
		kmin = keys[top_k - 1];
	}
	int m = 0;
	uint64_t total = 0;
	for (int i = 0; i < n_vocab; i++)
		if (!isnan(z[i]) && z_key(z[i]) >= kmin) {
			kw[m].key = z_key(z[i]);
			kw[m].w = (uint64_t)(expf(z[i] - mx) * FIX);
			total += kw[m++].w;
		}
	uint32_t pmin = kmin;
	if (top_p < 1.0f && m > 0) {
		uint64_t target = (uint64_t)ceil((double)top_p * (double)total), cum = 0;
		if (target < 1)
			target = 1;
		qsort(kw, (size_t)m, sizeof *kw, cmp_kw);
		for (int i = 0; i < m; i++) {
			cum += kw[i].w;
			if (cum >= target) {
				pmin = kw[i].key;
				break;
			}
		}
		if (pmin < kmin)
			pmin = kmin;
	}
	uint64_t mass = 0;
	for (int i = 0; i < n_vocab; i++) {
		bool in = !isnan(z[i]) && z_key(z[i]) >= pmin;
		if (kept)
			kept[i] = in;
		if (in)
			mass += (uint64_t)(expf(z[i] - mx) * FIX);
	}
	int32_t id = 0;
	if (mass) {
		uint64_t r = (uint64_t)(x4r_rng_uniform(seed, counter) * (double)mass), acc = 0;
		if (r >= mass)
			r = mass - 1;
		for (int i = 0; i < n_vocab; i++) {
			if (isnan(z[i]) || z_key(z[i]) < pmin)
				continue;
			acc += (uint64_t)(expf(z[i] - mx) * FIX);
			if (r < acc) {
				id = i;
				break;
			}
		}
	}
	return id;
}

int32_t x4r_sample(int n_vocab, const float *logits, float temperature, int top_k,
		   float top_p, uint64_t seed, uint64_t counter, unsigned char *kept)
{
	void *ws = malloc(x4r_sample_scratch_bytes(n_vocab));
	if (!ws)
		return -1;
	int32_t id = x4r_sample_ws(n_vocab, logits, temperature, top_k, top_p, seed, counter,
				   kept, ws);
	free(ws);
	return id;
}

void x4r_narrow(int64_t n, float *x, int dtype)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = dtype == 2 ? x4_f16_to_f32(x4_f32_to_f16(x[i]))
				  : x4_bf16_to_f32(x4_f32_to_bf16(x[i]));
}
