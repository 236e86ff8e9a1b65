/*
 * test_quant.c - the block formats (lib/quant/quant.c): type traits, fp16/bf16
 * conversion edge cases, hand-built blocks with hand-computed values,
 * round-trip error bounds on gaussian data, and the IQ4_NL/Q6_K scale
 * searches against the plain max/127 scale.  The bit-exact comparison with
 * ggml's dequantizers is tests/oracle_quant.py.
 */
#include "t.h"
#include "x4.h"
#include "blockfmt.h"

#include <math.h>
#include <stdint.h>

static uint32_t fbits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bitsf(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* splitmix64 + Box-Muller: reproducible gaussian data from a seed. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) /* (0, 1) */
{
	return ((rng_next(s) >> 11) + 0.5) * 0x1p-53;
}

static void gaussian(float *x, int n, uint64_t seed)
{
	uint64_t s = seed;
	for (int i = 0; i < n; i++) {
		double u = rng_unit(&s), v = rng_unit(&s);
		x[i] = (float)(sqrt(-2 * log(u)) * cos(2 * M_PI * v));
	}
}

static void test_traits(void)
{
	static const struct { int type, elems, bytes; const char *name; } known[] = {
		{ X4_T_F32, 1, 4, "F32" }, { X4_T_F16, 1, 2, "F16" },
		{ X4_T_Q8_0, 32, 34, "Q8_0" }, { X4_T_Q4_K, 256, 144, "Q4_K" },
		{ X4_T_Q6_K, 256, 210, "Q6_K" }, { X4_T_IQ4_NL, 32, 18, "IQ4_NL" },
		{ X4_T_BF16, 1, 2, "BF16" },
	};
	int bad = 0;
	char why[256] = "";
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
		int t = known[i].type;
		if (!x4_type_known(t) || x4_type_block_elems(t) != known[i].elems ||
		    x4_type_block_bytes(t) != known[i].bytes ||
		    strcmp(x4_type_name(t), known[i].name) ||
		    x4_type_bytes(t, 512) != 512u / known[i].elems * known[i].bytes) {
			bad++;
			snprintf(why, sizeof why, "type %d (%s)", t, known[i].name);
		}
	}
	T_OK(!bad, "quant_traits_known", "%s wrong", why);

	/* names only: in messages, never dequantized */
	static const struct { int type; const char *name; } named[] = {
		{ 2, "Q4_0" }, { 3, "Q4_1" }, { 6, "Q5_0" }, { 7, "Q5_1" }, { 9, "Q8_1" },
		{ 10, "Q2_K" }, { 11, "Q3_K" }, { 13, "Q5_K" }, { 15, "Q8_K" },
		{ 16, "IQ2_XXS" }, { 17, "IQ2_XS" }, { 18, "IQ3_XXS" }, { 19, "IQ1_S" },
		{ 21, "IQ3_S" }, { 22, "IQ2_S" }, { 23, "IQ4_XS" }, { 24, "I8" },
		{ 25, "I16" }, { 26, "I32" }, { 27, "I64" }, { 28, "F64" },
		{ 29, "IQ1_M" }, { 39, "MXFP4" },
	};
	bad = 0;
	for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
		int t = named[i].type;
		if (strcmp(x4_type_name(t), named[i].name) || x4_type_known(t) ||
		    x4_type_block_elems(t) || x4_type_block_bytes(t) || x4_type_bytes(t, 256)) {
			bad++;
			snprintf(why, sizeof why, "type %d gives name %s known %d", t,
				 x4_type_name(t), x4_type_known(t));
		}
	}
	T_OK(!bad, "quant_traits_named_unknown", "%s", why);
	T_OK(!strcmp(x4_type_name(4), "?") && !strcmp(x4_type_name(-1), "?") &&
	     !strcmp(x4_type_name(1000), "?") && !x4_type_known(4) && !x4_type_known(-1),
	     "quant_traits_unnamed", "ids 4, -1, 1000 should be '?' and unknown");
	T_OK(x4_type_bytes(X4_T_Q8_0, 33) == 0 && x4_type_bytes(X4_T_Q6_K, 128) == 0 &&
	     x4_type_bytes(X4_T_IQ4_NL, 64) == 36 && x4_type_bytes(X4_T_Q6_K, 0) == 0,
	     "quant_traits_bytes_partial_block", "a partial block must give 0 bytes");
}

static void test_f16(void)
{
	/* f32 bits -> expected f16 bits; each line says why it is there */
	static const struct { uint32_t f; uint16_t h; } to16[] = {
		{ 0x00000000, 0x0000 }, { 0x80000000, 0x8000 }, /* signed zeros */
		{ 0x3f800000, 0x3c00 },                          /* 1 */
		{ 0x477fe000, 0x7bff },                          /* 65504, max */
		{ 0x477fefff, 0x7bff },                          /* just below the overflow tie */
		{ 0x477ff000, 0x7c00 },                          /* 65520: tie, even is inf */
		{ 0x7f7fffff, 0x7c00 }, { 0xff7fffff, 0xfc00 },  /* FLT_MAX overflows */
		{ 0x7f800000, 0x7c00 }, { 0xff800000, 0xfc00 },  /* inf */
		{ 0x3f801000, 0x3c00 },                          /* 1+2^-11: tie to even (down) */
		{ 0x3f803000, 0x3c02 },                          /* 1+3*2^-11: tie to even (up) */
		{ 0x3f801001, 0x3c01 },                          /* just above the tie */
		{ 0x38800000, 0x0400 },                          /* 2^-14, min normal */
		{ 0x387fc000, 0x03ff },                          /* largest subnormal */
		{ 0x387fe000, 0x0400 },                          /* rounds up into the normals */
		{ 0x33800000, 0x0001 },                          /* 2^-24, min subnormal */
		{ 0x33000000, 0x0000 },                          /* 2^-25: tie to even, zero */
		{ 0x33000001, 0x0001 },                          /* just above: up */
		{ 0x33c00000, 0x0002 },                          /* 3*2^-25: tie to even (2) */
		{ 0x34200000, 0x0002 },                          /* 5*2^-25: tie to even (2) */
		{ 0xb3c00000, 0x8002 },                          /* negative subnormal tie */
		{ 0x2edbe6ff, 0x0000 },                          /* 1e-10 underflows */
	};
	int bad = 0;
	char why[200] = "";
	for (size_t i = 0; i < sizeof to16 / sizeof to16[0]; i++) {
		uint16_t h = x4_f32_to_f16(bitsf(to16[i].f));
		if (h != to16[i].h) {
			bad++;
			snprintf(why, sizeof why, "f32 0x%08x gave 0x%04x, want 0x%04x",
				 to16[i].f, h, to16[i].h);
		}
	}
	T_OK(!bad, "quant_f16_from_f32_edges", "%d wrong, last %s", bad, why);

	uint16_t hn = x4_f32_to_f16(bitsf(0x7fc00000)), hs = x4_f32_to_f16(bitsf(0xff800001));
	T_OK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) && (hs & 0x7c00) == 0x7c00 &&
	     (hs & 0x3ff) && (hs & 0x8000) && (hn & 0x200),
	     "quant_f16_nan", "NaN gave 0x%04x, signalling -NaN gave 0x%04x", hn, hs);

	static const struct { uint16_t h; uint32_t f; } to32[] = {
		{ 0x0001, 0x33800000 }, { 0x03ff, 0x387fc000 }, { 0x0400, 0x38800000 },
		{ 0x7bff, 0x477fe000 }, { 0x7c00, 0x7f800000 }, { 0xfc00, 0xff800000 },
		{ 0x8000, 0x80000000 }, { 0x3555, 0x3eaaa000 }, { 0x8001, 0xb3800000 },
	};
	bad = 0;
	for (size_t i = 0; i < sizeof to32 / sizeof to32[0]; i++) {
		uint32_t f = fbits(x4_f16_to_f32(to32[i].h));
		if (f != to32[i].f) {
			bad++;
			snprintf(why, sizeof why, "f16 0x%04x gave 0x%08x, want 0x%08x",
				 to32[i].h, f, to32[i].f);
		}
	}
	T_OK(!bad, "quant_f16_to_f32_edges", "%d wrong, last %s", bad, why);

	/* every half survives half -> float -> half (NaNs stay NaN) */
	bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = x4_f16_to_f32((uint16_t)h);
		uint16_t back = x4_f32_to_f16(f);
		bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
		if (nan ? !isnan(f) || (back & 0x7fff) <= 0x7c00 : back != h) {
			if (!bad++)
				snprintf(why, sizeof why, "0x%04x -> %g -> 0x%04x", h, f, back);
		}
	}
	T_OK(!bad, "quant_f16_roundtrip_all_65536", "%d wrong, first %s", bad, why);
}

static void test_bf16(void)
{
	static const struct { uint32_t f; uint16_t h; } tab[] = {
		{ 0x3f800000, 0x3f80 }, { 0x80000000, 0x8000 },
		{ 0x3f808000, 0x3f80 }, /* tie, even stays */
		{ 0x3f818000, 0x3f82 }, /* tie, odd rounds up */
		{ 0x3f808001, 0x3f81 }, { 0x3f80ffff, 0x3f81 },
		{ 0x7f800000, 0x7f80 }, { 0xff800000, 0xff80 },
		{ 0x7f7fffff, 0x7f80 }, /* FLT_MAX rounds to inf, as nearest-even must */
		{ 0x7f7f7fff, 0x7f7f },
		{ 0x00000001, 0x0000 }, { 0x00010000, 0x0001 }, /* subnormals kept */
		{ 0x7f800001, 0x7fc0 }, /* signalling NaN becomes quiet, not inf */
		{ 0xffc00001, 0xffc0 }, { 0x7fc00000, 0x7fc0 },
		{ 0x7f80ffff, 0x7fc0 }, /* a NaN that rounding would carry into inf */
	};
	int bad = 0;
	char why[200] = "";
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
		uint16_t h = x4_f32_to_bf16(bitsf(tab[i].f));
		if (h != tab[i].h) {
			bad++;
			snprintf(why, sizeof why, "f32 0x%08x gave 0x%04x, want 0x%04x",
				 tab[i].f, h, tab[i].h);
		}
	}
	T_OK(!bad, "quant_bf16_edges", "%d wrong, last %s", bad, why);

	bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = x4_bf16_to_f32((uint16_t)h);
		bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
		uint16_t back = x4_f32_to_bf16(f);
		if (fbits(f) != h << 16 || (nan ? back != (h | 0x40) : back != h))
			if (!bad++)
				snprintf(why, sizeof why, "0x%04x -> 0x%08x -> 0x%04x", h, fbits(f), back);
	}
	T_OK(!bad, "quant_bf16_roundtrip_all_65536", "%d wrong, first %s", bad, why);
}

/* Compares dequantized values with hand-computed ones (exact: every value
 * below is a small integer times a power of two). */
static void expect(const char *name, const float *y, const int *idx,
		   const float *want, int n)
{
	int bad = 0;
	char why[200] = "";
	for (int i = 0; i < n; i++) {
		if (fbits(y[idx[i]]) != fbits(want[i])) {
			bad++;
			snprintf(why, sizeof why, "element %d is %g, want %g", idx[i],
				 y[idx[i]], want[i]);
		}
	}
	T_OK(!bad, name, "%d wrong, last %s", bad, why);
}

static void test_known_blocks(void)
{
	x4_err e = { 0 };
	float y[256];

	/* Q8_0: d = 0.5 (fp16 0x3800), codes -128 -1 0 1 127 */
	uint8_t q8[34] = { 0x00, 0x38, 0x80, 0xff, 0x00, 0x01, 0x7f };
	int rc = x4_dequant(X4_T_Q8_0, q8, y, 32, &e);
	expect("quant_known_block type=Q8_0", y, (int[]){ 0, 1, 2, 3, 4, 31 },
	       (float[]){ -64, -0.5f, 0, 0.5f, 63.5f, 0 }, rc ? 0 : 6);

	/* IQ4_NL with a negative scale d = -0.5 (0xb800): byte 0 = 0x0f puts
	 * code 15 (113) at element 0 and code 0 (-127) at element 16; byte 1 =
	 * 0x78 puts code 8 (1) at element 1 and code 7 (-10) at element 17;
	 * byte 2 = 0x5a: code 10 (25) at element 2, code 5 (-35) at 18. */
	uint8_t iq[18] = { 0x00, 0xb8, 0x0f, 0x78, 0x5a };
	rc = x4_dequant(X4_T_IQ4_NL, iq, y, 32, &e);
	expect("quant_known_block type=IQ4_NL d<0", y, (int[]){ 0, 16, 1, 17, 2, 18, 3, 19 },
	       (float[]){ -56.5f, 63.5f, -0.5f, 5, -12.5f, 17.5f, 63.5f, 63.5f }, rc ? 0 : 8);

	/* Q6_K, d = 2 (0x4000).  Element 0: code 0 (q -32), element 1: code 63
	 * (q 31), both with sc[0] = 3.  Element 64 (half 0, quarter 2): high
	 * nibble of ql[0] = 5, qh[0] bits 4-5 = 2: code 37, q 5, sc[4] = 7.
	 * Element 160 (half 1, quarter 1): low nibble of ql[96] = 10, qh[32]
	 * bits 2-3 = 1: code 26, q -6, sc[10] = -128.  Element 255 (half 1,
	 * quarter 3, l 31): high nibble of ql[127], qh[63] bits 6-7: code 63,
	 * q 31, sc[15] = 127.  Every other sub-scale is 0, and code 0 there
	 * gives (2*0)*-32 = -0, as ggml's product order does. */
	uint8_t q6[210] = { 0 };
	q6[0] = 0x50; q6[1] = 0x0f; q6[128 + 1] = 0x03; q6[128] = 0x20;
	q6[96] = 0x0a; q6[128 + 32] = 0x04;
	q6[127] = 0xf0; q6[128 + 63] = 0xc0;
	q6[192 + 0] = 3; q6[192 + 4] = 7; q6[192 + 10] = 0x80; q6[192 + 15] = 127;
	q6[208] = 0x00; q6[209] = 0x40;
	rc = x4_dequant(X4_T_Q6_K, q6, y, 256, &e);
	expect("quant_known_block type=Q6_K codes=-32,31", y,
	       (int[]){ 0, 1, 2, 64, 65, 160, 161, 255, 16, 100, 200 },
	       (float[]){ -192, 186, -192, 70, -448, 1536, 8192, 7874, -0.0f, -0.0f, -0.0f },
	       rc ? 0 : 11);

	/* Q4_K, d = 1, dmin = 0.5.  Scale bytes: s[0] = 5 | 2<<6 (sc0 5, high
	 * bits of sc4), s[4] = 3 | 1<<6 (m0 3, high bits of m4), s[1] = 1 (sc1),
	 * s[5] = 2 (m1), s[8] = 0x97 (low bits of sc4 = 7 and m4 = 9), so sc4 =
	 * 39 and m4 = 25.  qs[0] = 0xa4: element 0 has q 4 (sub-block 0),
	 * element 32 has q 10 (sub-block 1); qs[64] = 0x0c: element 128 has q 12
	 * (sub-block 4). */
	uint8_t q4[144] = { 0x00, 0x3c, 0x00, 0x38 };
	q4[4 + 0] = 5 | 2 << 6; q4[4 + 4] = 3 | 1 << 6; q4[4 + 1] = 1; q4[4 + 5] = 2;
	q4[4 + 8] = 0x97;
	q4[16 + 0] = 0xa4; q4[16 + 64] = 0x0c;
	rc = x4_dequant(X4_T_Q4_K, q4, y, 256, &e);
	expect("quant_known_block type=Q4_K", y, (int[]){ 0, 1, 32, 33, 128, 129, 160, 64 },
	       (float[]){ 18.5f, -1.5f, 9, -1, 455.5f, -12.5f, 0, 0 }, rc ? 0 : 8);

	uint8_t f16[6] = { 0x00, 0x3c, 0x01, 0x00, 0x00, 0xfc };
	rc = x4_dequant(X4_T_F16, f16, y, 3, &e);
	expect("quant_known_block type=F16", y, (int[]){ 0, 1, 2 },
	       (float[]){ 1, 0x1p-24f, -INFINITY }, rc ? 0 : 3);
	uint8_t bf[4] = { 0x80, 0x3f, 0x49, 0xc0 };
	rc = x4_dequant(X4_T_BF16, bf, y, 2, &e);
	expect("quant_known_block type=BF16", y, (int[]){ 0, 1 },
	       (float[]){ 1, -3.140625f }, rc ? 0 : 2);
	float f32[2] = { 1.25f, -7 };
	rc = x4_dequant(X4_T_F32, f32, y, 2, &e);
	expect("quant_known_block type=F32", y, (int[]){ 0, 1 }, f32, rc ? 0 : 2);
}

/* Squared error of each block of x against its quantize-dequantize image. */
static int roundtrip(int type, const float *x, float *y, int n, x4_err *e)
{
	uint8_t *q = malloc(x4_type_bytes(type, (uint64_t)n));
	int rc = q ? x4_quant(type, x, q, (uint64_t)n, e) : X4_ENOMEM;
	if (!rc)
		rc = x4_dequant(type, q, y, (uint64_t)n, e);
	free(q);
	return rc;
}

static double rel_rms(const float *x, const float *y, int n)
{
	double num = 0, den = 0;
	for (int i = 0; i < n; i++) {
		num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
		den += (double)x[i] * x[i];
	}
	return sqrt(num / den);
}

/*
 * Relative RMS error bounds on unit gaussian data, and why:
 *  - Q8_0: step d = amax/127 with amax of 32 gaussians about 2.1 (rarely
 *    above 3.5); uniform rounding error has RMS d/sqrt(12), so about
 *    2.1/127/3.46 = 0.005.  Bound 0.01.
 *  - Q6_K: 64 levels per 16 elements, amax of 16 about 1.8: RMS about
 *    1.8/31.5/3.46 = 0.017, plus the int8 sub-scale rounding.  Bound 0.03.
 *  - IQ4_NL: 16 levels over +-amax (2.1): a uniform 4-bit grid would give
 *    (2*2.1/15)/3.46 = 0.08; the codebook is denser near zero where the
 *    mass is, but coarser at the tails.  Bound 0.12.
 *  - BF16: 8 significant bits; nearest-even rounding is within half an ulp,
 *    2^-8 of the value's power of two, so |x - y| <= 2^-8 |x| per element.
 *  - F16: 11 significant bits: |x - y| <= 2^-11 |x| in the normal range.
 */
static void test_roundtrip(int n, uint64_t seed)
{
	float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
	x4_err e = { 0 };
	char name[160];
	gaussian(x, n, seed);

	static const struct { int type; double bound; } rms[] = {
		{ X4_T_Q8_0, 0.01 }, { X4_T_Q6_K, 0.03 }, { X4_T_IQ4_NL, 0.12 },
	};
	for (size_t k = 0; k < sizeof rms / sizeof rms[0]; k++) {
		int rc = roundtrip(rms[k].type, x, y, n, &e);
		double err = rc ? INFINITY : rel_rms(x, y, n);
		snprintf(name, sizeof name, "quant_roundtrip_rms type=%s n=%d seed=%llu",
			 x4_type_name(rms[k].type), n, (unsigned long long)seed);
		T_OK(err <= rms[k].bound, name, "relative RMS %.5f above %.3f (rc %d %s)",
		     err, rms[k].bound, rc, rc ? e.msg : "");
		printf("# %s rel_rms=%.5f bound=%.3f\n", name, err, rms[k].bound);
	}

	static const struct { int type; double bound; } rel[] = {
		{ X4_T_BF16, 0x1p-8 }, { X4_T_F16, 0x1p-11 },
	};
	for (size_t k = 0; k < sizeof rel / sizeof rel[0]; k++) {
		int rc = roundtrip(rel[k].type, x, y, n, &e);
		double worst = 0;
		for (int i = 0; !rc && i < n; i++) {
			if (fabsf(x[i]) < 0x1p-14f) /* below fp16's normals */
				continue;
			worst = fmax(worst, fabs((double)x[i] - y[i]) / fabs((double)x[i]));
		}
		snprintf(name, sizeof name, "quant_roundtrip_elem type=%s n=%d seed=%llu",
			 x4_type_name(rel[k].type), n, (unsigned long long)seed);
		T_OK(!rc && worst <= rel[k].bound, name, "worst relative error %.3g above %.3g",
		     worst, rel[k].bound);
	}
	free(x);
	free(y);
}

/* The codebook entry nearest to v: the test's own, linear scan. */
static int nearest16(float v)
{
	int best = 0;
	for (int k = 1; k < 16; k++)
		if (fabsf(v - x4_iq4nl_values[k]) <= fabsf(v - x4_iq4nl_values[best]))
			best = k;
	return best;
}

/*
 * The searched IQ4_NL scale against the plain one (d = -max/127 in fp16,
 * which puts the largest element on the codebook's -127 end, codes
 * nearest): the search must be no worse on every block and better on
 * average.  Q6_K: the searched scales against d_sub = max/-32, sub-scales
 * rounded against d = max(d_sub)/-128: better on average.
 */
static void test_search(int nblocks, uint64_t seed)
{
	int n = nblocks * 256;
	float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
	x4_err e = { 0 };
	char name[160];
	gaussian(x, n, seed);
	/* a spread of block magnitudes, as in a real tensor */
	for (int i = 0; i < n; i++)
		x[i] *= powf(10, (float)((i / 256) % 5) - 3);

	int rc = roundtrip(X4_T_IQ4_NL, x, y, n, &e);
	double s_search = 0, s_naive = 0;
	int worse = -1;
	for (int b = 0; !rc && b < n / 32; b++) {
		const float *xb = x + 32 * b;
		float mx = 0;
		for (int i = 0; i < 32; i++)
			if (fabsf(xb[i]) > fabsf(mx))
				mx = xb[i];
		float d = x4_f16_to_f32(x4_f32_to_f16(-mx / 127));
		double en = 0, es = 0;
		for (int i = 0; i < 32; i++) {
			float v = d ? d * (float)x4_iq4nl_values[nearest16(xb[i] / d)] : 0;
			en += ((double)xb[i] - v) * ((double)xb[i] - v);
			es += ((double)xb[i] - y[32 * b + i]) * ((double)xb[i] - y[32 * b + i]);
		}
		if (es > en && worse < 0)
			worse = b;
		s_search += es / (en > 0 ? en : 1);
		s_naive += 1;
	}
	snprintf(name, sizeof name, "quant_search_beats_naive type=IQ4_NL n=%d seed=%llu",
		 n, (unsigned long long)seed);
	T_OK(!rc && worse < 0 && s_search < s_naive, name,
	     "rc %d, first block worse than naive %d, mean error ratio %.4f", rc, worse,
	     s_search / s_naive);
	printf("# %s mean(searched/naive squared error)=%.4f\n", name, s_search / s_naive);

	rc = roundtrip(X4_T_Q6_K, x, y, n, &e);
	double tot_s = 0, tot_n = 0;
	for (int b = 0; !rc && b < nblocks; b++) {
		const float *xb = x + 256 * b;
		float sub[16], smax = 0;
		for (int j = 0; j < 16; j++) {
			float mx = 0;
			for (int i = 0; i < 16; i++)
				if (fabsf(xb[16 * j + i]) > fabsf(mx))
					mx = xb[16 * j + i];
			sub[j] = mx / -32;
			if (fabsf(sub[j]) > fabsf(smax))
				smax = sub[j];
		}
		float d = x4_f16_to_f32(x4_f32_to_f16(smax / -128));
		for (int j = 0; j < 16; j++) {
			float sc = d ? fminf(127, roundf(sub[j] / d)) : 0;
			float s = d * sc;
			for (int i = 0; i < 16; i++) {
				float v = xb[16 * j + i];
				float q = s ? fmaxf(-32, fminf(31, roundf(v / s))) : 0;
				double r = (double)v - (double)(s * q);
				tot_n += r * r;
				r = (double)v - y[256 * b + 16 * j + i];
				tot_s += r * r;
			}
		}
	}
	snprintf(name, sizeof name, "quant_search_beats_naive type=Q6_K n=%d seed=%llu",
		 n, (unsigned long long)seed);
	T_OK(!rc && tot_s < tot_n, name, "rc %d, searched %.6g naive %.6g", rc, tot_s, tot_n);
	printf("# %s searched/naive squared error=%.4f\n", name, tot_s / tot_n);
	free(x);
	free(y);
}

/* Blocks whose values lie exactly on the format's grid come back exactly:
 * the search must find the grid (codes at both ends included). */
static void test_exact_grid(void)
{
	x4_err e = { 0 };
	float x[256], y[256];
	for (int sign = -1; sign <= 1; sign += 2) {
		for (int i = 0; i < 32; i++)
			x[i] = sign * 0.5f * x4_iq4nl_values[(i * 7) % 16];
		int rc = roundtrip(X4_T_IQ4_NL, x, y, 32, &e);
		T_OK(!rc && !memcmp(x, y, sizeof(float) * 32),
		     sign < 0 ? "quant_exact_grid type=IQ4_NL d=-0.5" : "quant_exact_grid type=IQ4_NL d=0.5",
		     "rc %d, first value %g -> %g", rc, x[0], y[0]);
	}
	/* Q6_K: d = 2^-6, sub-scales with -128 the largest, codes -32..31 in
	 * every sub-block (-32 its largest element, so the scale is unique) */
	static const int sc[16] = { -128, 5, -7, 100, 1, -1, 64, 127, -3, 9, 33, -50, 2, 11, -90, 77 };
	for (int j = 0; j < 16; j++)
		for (int i = 0; i < 16; i++) {
			int q = i == 0 ? -32 : i == 1 ? 31 : (i * 13 + j * 5) % 63 - 31;
			x[16 * j + i] = 0x1p-6f * (float)sc[j] * (float)q;
		}
	int rc = roundtrip(X4_T_Q6_K, x, y, 256, &e);
	int bad = -1;
	for (int i = 0; i < 256 && bad < 0; i++)
		if (x[i] != y[i])
			bad = i;
	T_OK(!rc && bad < 0, "quant_exact_grid type=Q6_K codes=-32..31",
	     "rc %d, element %d: %g -> %g", rc, bad, bad < 0 ? 0 : x[bad], bad < 0 ? 0 : y[bad]);

	float z[256] = { 0 };
	int ok = 1;
	static const int zt[] = { X4_T_Q8_0, X4_T_IQ4_NL, X4_T_Q6_K };
	for (int k = 0; k < 3; k++) {
		for (int i = 0; i < 256; i++)
			y[i] = 1;
		ok &= !roundtrip(zt[k], z, y, 256, &e) && !memcmp(y, z, sizeof z);
	}
	T_OK(ok, "quant_zero_block types=Q8_0,IQ4_NL,Q6_K", "an all-zero block must give +0s");
}

static void test_invalid(void)
{
	x4_err e = { 0 };
	uint8_t buf[1024] = { 0 };
	float x[512] = { 0 };
	T_OK(x4_dequant(X4_T_Q8_0, buf, x, 33, &e) == X4_EINVAL && e.msg[0],
	     "quant_invalid_n dequant type=Q8_0 n=33", "got %d", e.code);
	T_OK(x4_quant(X4_T_IQ4_NL, x, buf, 31, &e) == X4_EINVAL,
	     "quant_invalid_n quant type=IQ4_NL n=31", "got %d", e.code);
	T_OK(x4_quant(X4_T_Q6_K, x, buf, 128, &e) == X4_EINVAL &&
	     x4_dequant(X4_T_Q4_K, buf, x, 300, &e) == X4_EINVAL,
	     "quant_invalid_n types=Q6_K,Q4_K n=128,300", "got %d", e.code);
	T_OK(x4_dequant(2, buf, x, 32, &e) == X4_EINVAL && strstr(e.msg, "Q4_0"),
	     "quant_invalid_type dequant type=Q4_0", "got %d: %s", e.code, e.msg);
	T_OK(x4_quant(X4_T_Q4_K, x, buf, 256, &e) == X4_EINVAL,
	     "quant_invalid_type quant type=Q4_K", "got %d", e.code);
	T_OK(x4_quant(2, x, buf, 32, &e) == X4_EINVAL && strstr(e.msg, "Q4_0"),
	     "quant_invalid_type quant type=Q4_0", "got %d: %s", e.code, e.msg);
	/* The block decode's own refusal, behind x4_dequant's type check: a
	 * type without a case is X4_EINVAL and leaves y as it was. */
	static const uint8_t zero[34] = { 0 }; /* one Q8_0 block of zeros */
	x[0] = 7;
	T_OK(x4b_decode_row(2, zero, x, 32) == X4_EINVAL && x[0] == 7 &&
	     x4b_decode_row(X4_T_Q8_0, zero, x, 32) == 0 && x[0] == 0,
	     "quant_invalid_type x4b_decode_row type=Q4_0", "x[0] %g", x[0]);
	T_OK(x4_quant(X4_T_Q8_0, x, buf, 0, &e) == 0 && x4_dequant(X4_T_Q6_K, buf, x, 0, &e) == 0,
	     "quant_empty n=0", "n=0 must succeed");
	x[5] = NAN;
	T_OK(x4_quant(X4_T_IQ4_NL, x, buf, 32, &e) == X4_ENUMERIC,
	     "quant_nonfinite type=IQ4_NL", "got %d", e.code);
	x[5] = 1e30f;
	T_OK(x4_quant(X4_T_Q8_0, x, buf, 32, &e) == X4_ERANGE,
	     "quant_overflow type=Q8_0", "got %d", e.code);
}

int main(void)
{
	test_traits();
	test_f16();
	test_bf16();
	test_known_blocks();
	test_roundtrip(256 * 64, 1);
	test_roundtrip(256 * 7, 42);
	test_search(64, 7);
	test_exact_grid();
	test_invalid();
	return t_done();
}
