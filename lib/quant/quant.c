/*
 * quant.c - ggml block formats: type traits, fp16/bf16 conversion, and the
 * dequantizers and quantizers x4 needs (docs/gguf.md 2 and 3).
 *
 * Dequantization must be bit-identical to ggml's (the oracle compares the
 * float32 bits), so every product is formed in the same order ggml forms it.
 */
#include "x4_int.h"
#include "blockfmt.h"

#include <math.h>
#include <pthread.h>

const int8_t x4_iq4nl_values[16] = { X4B_IQ4NL_CODES_LO, X4B_IQ4NL_CODES_HI };

/* The names of ggml's type ids (gaps are ids ggml retired); the geometry of
 * those x4 decodes is lib/blockfmt.h's. */
static const char *const type_names[] = {
	[0] = "F32",
	[1] = "F16",
	[2] = "Q4_0",
	[3] = "Q4_1",
	[6] = "Q5_0",
	[7] = "Q5_1",
	[8] = "Q8_0",
	[9] = "Q8_1",
	[10] = "Q2_K",
	[11] = "Q3_K",
	[12] = "Q4_K",
	[13] = "Q5_K",
	[14] = "Q6_K",
	[15] = "Q8_K",
	[16] = "IQ2_XXS",
	[17] = "IQ2_XS",
	[18] = "IQ3_XXS",
	[19] = "IQ1_S",
	[20] = "IQ4_NL",
	[21] = "IQ3_S",
	[22] = "IQ2_S",
	[23] = "IQ4_XS",
	[24] = "I8",
	[25] = "I16",
	[26] = "I32",
	[27] = "I64",
	[28] = "F64",
	[29] = "IQ1_M",
	[30] = "BF16",
	[39] = "MXFP4",
};

const char *x4_type_name(int type)
{
	if (type < 0 || type >= (int)X4_ARRAY_LEN(type_names) || !type_names[type])
		return "?";
	return type_names[type];
}

bool x4_type_known(int type) { return x4b_block_elems(type) > 0; }
int x4_type_block_elems(int type) { return x4b_block_elems(type); }
int x4_type_block_bytes(int type) { return x4b_block_bytes(type); }
uint64_t x4_type_bytes(int type, uint64_t n) { return x4b_row_bytes(type, n); }

/* ---- scalar conversions ---- */

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

float x4_f16_to_f32(uint16_t h) { return x4b_f16(h); }

uint16_t x4_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffff;

	if (a > 0x7f800000) /* NaN: keep it quiet and keep the top payload bits */
		return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff);
	if (a >= 0x477ff000) /* rounds to >= 65520: overflow to inf */
		return sign | 0x7c00;
	if (a < 0x38800000) {
		/* below 2^-14: subnormal result; the float's significand with
		 * its hidden bit, shifted so one unit is 2^-24, rounded even */
		if (a < 0x33000000) /* below 2^-25: rounds to zero (tie too) */
			return sign;
		uint32_t e = a >> 23;
		uint32_t m = (a & 0x7fffff) | 0x800000;
		uint32_t shift = 126 - e; /* 14..24 */
		uint32_t q = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		if (rem > half || (rem == half && (q & 1)))
			q++;
		return sign | (uint16_t)q;
	}
	/* normal: rebias, then round the 13 dropped bits to nearest even; a
	 * carry out of the mantissa correctly bumps the exponent */
	uint32_t r = a - ((uint32_t)112 << 23);
	r += 0xfff + ((r >> 13) & 1);
	return sign | (uint16_t)(r >> 13);
}

float x4_bf16_to_f32(uint16_t h) { return x4b_bf16(h); }

uint16_t x4_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* ---- dequantization ---- */

static void store_f16(uint8_t *p, uint16_t h)
{
	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

static int check_args(const char *what, int type, const void *src,
		      const void *dst, uint64_t n, x4_err *e)
{
	if (!x4_type_known(type))
		return x4_err_set(e, X4_EINVAL, "%s: type %d (%s) is not one x4 handles",
				  what, type, x4_type_name(type));
	uint64_t be = (uint64_t)x4_type_block_elems(type);
	if (n % be)
		return x4_err_set(e, X4_EINVAL,
				  "%s: %llu elements of %s is not a multiple of its %llu-element block",
				  what, (unsigned long long)n, x4_type_name(type),
				  (unsigned long long)be);
	if (n && (!src || !dst))
		return x4_err_set(e, X4_EINVAL, "%s: NULL buffer", what);
	return 0;
}

int x4_dequant(int type, const void *src, float *dst, uint64_t n, x4_err *e)
{
	int rc = check_args("dequant", type, src, dst, n, e);
	if (rc)
		return rc;
	if (x4b_decode_row(type, src, dst, n)) /* lib/blockfmt.h */
		return x4_err_set(e, X4_EINVAL, "dequant: type %d (%s) is in lib/blockfmt.h's "
				  "table but x4b_decode_row has no decode for it", type,
				  x4_type_name(type));
	return 0;
}

/* ---- quantization ---- */

/* Q8_0 exactly as ggml's reference: the codes use the unrounded d (and its
 * reciprocal), only the stored d is fp16; halves round away from zero. */
static void quant_q8_0(const float *x, uint8_t *b)
{
	float amax = 0;
	for (int i = 0; i < 32; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
	store_f16(b, x4_f32_to_f16(d));
	for (int i = 0; i < 32; i++)
		b[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
}

/*
 * The codebook entry nearest to v, by table: every midpoint between two
 * neighbouring entries is a multiple of 1/2, so a half-unit bin never
 * straddles one and floor(2v) picks the answer (exact midpoints go up).
 * This is the quantizer's inner loop; a binary search was 10x slower.
 */
static uint8_t iq4nl_lut[512]; /* bin floor(2v) + 256, v in [-128, 128) */
static pthread_once_t iq4nl_lut_once = PTHREAD_ONCE_INIT;

static void iq4nl_lut_init(void)
{
	for (int k = 0; k < 512; k++) {
		float v = (k - 256) * 0.5f; /* the bin's lower end */
		int best = 0;
		for (int c = 1; c < 16; c++)
			if (fabsf(v - x4_iq4nl_values[c]) <= fabsf(v - x4_iq4nl_values[best]))
				best = c;
		iq4nl_lut[k] = (uint8_t)best;
	}
}

/* fminf/fmaxf are libm calls without -ffast-math; this is inline. */
static float clampf(float v, float lo, float hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static int iq4nl_nearest(float v)
{
	v = clampf(v, -128.0f, 127.75f);
	/* truncation is floor here (the index is >= 0), and unlike floorf it
	 * is one instruction on baseline x86-64 */
	return iq4nl_lut[(int)(2 * v + 256)];
}

/* Codes for x with scale d (the stored fp16 value), and their exact squared
 * error as the dequantizer will see it. */
static double iq4nl_assign(const float *x, float d, uint8_t *q)
{
	double err = 0;
	for (int i = 0; i < 32; i++) {
		q[i] = d != 0 ? (uint8_t)iq4nl_nearest(x[i] / d) : 8;
		double r = (double)x[i] - (double)(d * (float)x4_iq4nl_values[q[i]]);
		err += r * r;
	}
	return err;
}

/* The least-squares scale for fixed codes, rounded to what fp16 stores. */
static float iq4nl_refit(const float *x, const uint8_t *q)
{
	double sqx = 0, sqq = 0;
	for (int i = 0; i < 32; i++) {
		double v = x4_iq4nl_values[q[i]];
		sqx += v * x[i];
		sqq += v * v;
	}
	return sqq > 0 ? x4_f16_to_f32(x4_f32_to_f16((float)(sqx / sqq))) : 0;
}

/*
 * IQ4_NL with a scale search.  Candidates map the largest-magnitude element
 * onto the codebook's negative end (-127, as ggml's reference does) or its
 * positive end (+113), each nudged by t = -15..15 units; each gets codes and
 * is scored by its least-squares error reduction (sum qx)^2 / sum q^2, the
 * cheap exact score for a refitted scale (ggml's, unweighted).  The winner's
 * refit scale is rounded to fp16 and given fresh codes, and then competes,
 * by the exact error the dequantizer will produce, with the plain +-max/127
 * scales, so the result is never worse than those.  A few refit rounds on
 * the winner finish it.
 */
static void quant_iq4nl(const float *x, uint8_t *b)
{
	float mx = 0;
	for (int i = 0; i < 32; i++)
		if (fabsf(x[i]) > fabsf(mx))
			mx = x[i];
	pthread_once(&iq4nl_lut_once, iq4nl_lut_init);
	if (fabsf(mx) < 1e-30f) {
		store_f16(b, 0);
		memset(b + 2, 0x88, 16); /* code 8 (value 1) dequantizes to +0 */
		return;
	}

	static const int ends[2] = { -127, 113 };
	float best_scale = -mx / 127;
	double best_score = -1;
	for (int k = 0; k < 2 * 31; k++) {
		float id = (float)(ends[k / 31] + (k % 31 - 15)) / mx;
		float sqx = 0, sqq = 0;
		for (int i = 0; i < 32; i++) {
			float v = x4_iq4nl_values[iq4nl_nearest(x[i] * id)];
			sqx += v * x[i];
			sqq += v * v;
		}
		double score = (double)sqx * sqx / sqq;
		if (score > best_score) {
			best_score = score;
			best_scale = sqx / sqq;
		}
	}

	uint8_t q[32], best_q[32];
	const float cand[3] = {
		x4_f16_to_f32(x4_f32_to_f16(best_scale)),
		x4_f16_to_f32(x4_f32_to_f16(-mx / 127)), /* the plain scales */
		x4_f16_to_f32(x4_f32_to_f16(mx / 127)),
	};
	float best_d = 0;
	double best = INFINITY;
	for (int k = 0; k < 3; k++) {
		double err = iq4nl_assign(x, cand[k], q);
		if (err < best) {
			best = err;
			best_d = cand[k];
			memcpy(best_q, q, 32);
		}
	}
	for (int it = 0; it < 3; it++) {
		float d = iq4nl_refit(x, best_q);
		double err = iq4nl_assign(x, d, q);
		if (!(err < best))
			break;
		best = err;
		best_d = d;
		memcpy(best_q, q, 32);
	}

	store_f16(b, x4_f32_to_f16(best_d));
	for (int j = 0; j < 16; j++)
		b[2 + j] = (uint8_t)(best_q[j] | best_q[j + 16] << 4);
}

/* roundf for |v| < 2^23 without a libm call (baseline x86-64 has no
 * rounding instruction): halves go away from zero. */
static int round_away(float v)
{
	int r = (int)v;
	float f = v - (float)r; /* exact */
	return r + (f >= 0.5f) - (f <= -0.5f);
}

/* Nearest 6-bit code (q in -32..31) for x at inverse scale is = 1/(d*sc).
 * (Multiplying by the inverse may pick the farther code within an ulp of a
 * midpoint; the error is then measured, not assumed.) */
static int q6_code(float x, float is)
{
	return round_away(clampf(x * is, -32.0f, 31.0f));
}

/* Error of one 16-element sub-block at effective scale s, codes into q. */
static double q6_sub_err(const float *x, float s, int8_t *q)
{
	float is = s != 0 ? 1 / s : 0;
	double err = 0;
	for (int i = 0; i < 16; i++) {
		q[i] = (int8_t)q6_code(x[i], is);
		double r = (double)x[i] - (double)(s * (float)q[i]);
		err += r * r;
	}
	return err;
}

/* The best real scale of one sub-block: candidates map its largest element
 * onto -32 or +31 nudged in tenths (as ggml's make_qx_quants nudges), each
 * refitted by least squares; scored by the unrounded error. */
static float q6_sub_scale(const float *x)
{
	float mx = 0;
	for (int i = 0; i < 16; i++)
		if (fabsf(x[i]) > fabsf(mx))
			mx = x[i];
	if (fabsf(mx) < 1e-30f)
		return 0;
	double sxx = 0;
	for (int i = 0; i < 16; i++)
		sxx += (double)x[i] * x[i];

	float best_s = mx / -32;
	double best = INFINITY;
	for (int sign = 0; sign < 2; sign++) {
		for (int t = -10; t <= 10; t++) {
			float c = sign ? 31 + 0.1f * t : -32 - 0.1f * t;
			float is = c / mx;
			float sqx = 0, sqq = 0;
			for (int i = 0; i < 16; i++) {
				float q = (float)q6_code(x[i], is);
				sqx += q * x[i];
				sqq += q * q;
			}
			if (sqq == 0)
				continue;
			double err = sxx - (double)sqx * sqx / sqq;
			if (err < best) {
				best = err;
				best_s = sqx / sqq;
			}
		}
	}
	return best_s;
}

/*
 * Q6_K: a scale per 16 elements found by q6_sub_scale, then the 16 scales
 * quantized to int8 against the super-block's fp16 d.  d is searched over
 * smax/c for c = -128 .. -126.75 and 127 .. 125.75 in quarter steps (smax
 * the sub-scale of largest magnitude, sign kept); for each d
 * every int8 scale may move one step from its rounding, and the codes are
 * re-assigned against the final d*sc, so the score is the error the
 * dequantizer will produce.
 */
static void quant_q6k(const float *x, uint8_t *b)
{
	float s[16], smax = 0;
	for (int j = 0; j < 16; j++) {
		s[j] = q6_sub_scale(x + 16 * j);
		if (fabsf(s[j]) > fabsf(smax))
			smax = s[j];
	}

	int8_t q[256], tq[16];
	int8_t sc[16];
	float best_d = 0;
	double best = INFINITY;
	for (int j = 0; j < 16; j++)
		sc[j] = 0;
	memset(q, 0, sizeof q);

	if (fabsf(smax) >= 1e-30f) {
		int8_t cq[256], csc[16];
		for (int k = 0; k < 2 * 6; k++) {
			float c = k < 6 ? -128 + 0.25f * (k % 6) : 127 - 0.25f * (k % 6);
			float d = x4_f16_to_f32(x4_f32_to_f16(smax / c));
			if (d == 0 || isinf(d))
				continue;
			double err = 0;
			for (int j = 0; j < 16; j++) {
				int r = round_away(clampf(s[j] / d, -128, 127));
				double bj = INFINITY;
				for (int v = r - 1; v <= r + 1; v++) {
					if (v < -128 || v > 127)
						continue;
					double ej = q6_sub_err(x + 16 * j, d * (float)v, tq);
					if (ej < bj) {
						bj = ej;
						csc[j] = (int8_t)v;
						memcpy(cq + 16 * j, tq, 16);
					}
				}
				err += bj;
			}
			if (err < best) {
				best = err;
				best_d = d;
				memcpy(sc, csc, 16);
				memcpy(q, cq, 256);
			}
		}
	}

	memset(b, 0, 192);
	for (int e = 0; e < 256; e++) {
		int u = q[e] + 32;
		int h = e / 128, k = (e % 128) / 32, l = e % 32;
		b[64 * h + l + 32 * (k & 1)] |= (uint8_t)((u & 15) << (4 * (k >> 1)));
		b[128 + 32 * h + l] |= (uint8_t)((u >> 4) << (2 * k));
	}
	memcpy(b + 192, sc, 16);
	store_f16(b + 208, x4_f32_to_f16(best_d));
}

int x4_quant(int type, const float *src, void *dst, uint64_t n, x4_err *e)
{
	int rc = check_args("quant", type, src, dst, n, e);
	if (rc)
		return rc;
	if (type == X4_T_Q4_K)
		return x4_err_set(e, X4_EINVAL,
				  "quant: x4 dequantizes Q4_K but does not write it; use Q6_K or IQ4_NL");
	uint8_t *d = dst;

	switch (type) {
	case X4_T_F32:
		memcpy(dst, src, n * 4);
		return 0;
	case X4_T_F16:
		for (uint64_t i = 0; i < n; i++)
			store_f16(d + 2 * i, x4_f32_to_f16(src[i]));
		return 0;
	case X4_T_BF16:
		for (uint64_t i = 0; i < n; i++)
			store_f16(d + 2 * i, x4_f32_to_bf16(src[i]));
		return 0;
	}

	/* The block types x4 writes; any other is refused here, not handed to
	 * another type's quantizer. */
	void (*quant_block)(const float *x, uint8_t *b);
	switch (type) {
	case X4_T_Q8_0:
		quant_block = quant_q8_0;
		break;
	case X4_T_IQ4_NL:
		quant_block = quant_iq4nl;
		break;
	case X4_T_Q6_K:
		quant_block = quant_q6k;
		break;
	default:
		return x4_err_set(e, X4_EINVAL, "quant: x4 has no quantizer for type %d (%s)", type,
				  x4_type_name(type));
	}

	/* A NaN would poison the scale search and a value past fp16's range
	 * gives an infinite scale. */
	uint64_t be = (uint64_t)x4_type_block_elems(type);
	size_t bb = (size_t)x4_type_block_bytes(type);
	for (uint64_t i = 0; i < n; i++) {
		if (!isfinite(src[i]))
			return x4_err_set(e, X4_ENUMERIC,
					  "quant %s: element %llu is %f; only finite values can be quantized",
					  x4_type_name(type), (unsigned long long)i, src[i]);
		if (fabsf(src[i]) > 65504.0f * 31)
			return x4_err_set(e, X4_ERANGE,
					  "quant %s: element %llu (%g) is too large for an fp16 block scale; scale the tensor down or store it as F32",
					  x4_type_name(type), (unsigned long long)i, src[i]);
	}
	for (uint64_t i = 0; i < n / be; i++)
		quant_block(src + i * be, d + i * bb);
	return 0;
}
