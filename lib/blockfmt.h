/*
 * blockfmt.h - the block formats x4 reads (docs/gguf.md 3), once, for C and
 * CUDA alike: each type's geometry (X4_BLOCK_FORMATS) and the decode of one
 * block (x4b_decode_*).  x4_dequant, the CPU trunk, the synthetic writer,
 * the kernels' format traits (kernels/quant_dev.cuh) and the tests all take
 * them from here.  The kernels' product cores read the same bytes in their
 * own lane layouts; tests/gpu_kern/gemv_quant.h, gemm_quant.h and
 * moe_experts.h check them against these.
 *
 * Every product is formed in ggml's order (scale times code, in float), so
 * a decode here is bit-identical to ggml's dequantization.
 *
 * Internal: lib/, kernels/ and tests/ include it; lib/x4.h is the public
 * way in.
 */
#ifndef X4_BLOCKFMT_H
#define X4_BLOCKFMT_H

#include <stdint.h>
#include <string.h>

#include "x4.h"

#if defined(__CUDACC__)
#define X4B_FN static __host__ __device__ __forceinline__
/* The geometry is constexpr in CUDA C++: the kernels' templates take it. */
#define X4B_CFN static constexpr __host__ __device__ inline
#else
#define X4B_FN static inline
#define X4B_CFN static inline
#endif

/* The types x4 decodes: type id, values a block, bytes a block. */
#define X4_BLOCK_FORMATS(X)          \
	X(X4_T_F32, 1, 4)            \
	X(X4_T_F16, 1, 2)            \
	X(X4_T_Q8_0, 32, 34)         \
	X(X4_T_Q4_K, 256, 144)       \
	X(X4_T_Q6_K, 256, 210)       \
	X(X4_T_IQ4_NL, 32, 18)       \
	X(X4_T_BF16, 1, 2)

/* Values a block; 0 for a type x4 does not decode. */
X4B_CFN int x4b_block_elems(int type)
{
	switch (type) {
#define X4B_CASE_(t, be, bb) case t: return be;
	X4_BLOCK_FORMATS(X4B_CASE_)
#undef X4B_CASE_
	default:
		return 0;
	}
}

/* Bytes a block; 0 for a type x4 does not decode. */
X4B_CFN int x4b_block_bytes(int type)
{
	switch (type) {
#define X4B_CASE_(t, be, bb) case t: return bb;
	X4_BLOCK_FORMATS(X4B_CASE_)
#undef X4B_CASE_
	default:
		return 0;
	}
}

/* Bytes of a row of n values (n a multiple of the block); 0 otherwise. */
X4B_CFN uint64_t x4b_row_bytes(int type, uint64_t n)
{
	const uint64_t be = (uint64_t)x4b_block_elems(type);
	return be && n % be == 0 ? n / be * (uint64_t)x4b_block_bytes(type) : 0;
}

/* ---- the IQ4_NL codebook (docs/gguf.md 3.5), codes 0..7 and 8..15 ---- */

#define X4B_IQ4NL_CODES_LO -127, -104, -83, -65, -49, -35, -22, -10
#define X4B_IQ4NL_CODES_HI 1, 13, 25, 38, 53, 69, 89, 113
/* Eight int8 values as the bytes of a uint64, value 0 lowest: what the
 * kernels' byte-permute lookups take (quant_dev.cuh). */
#define X4B_PACK8_(a, b, c, d, e, f, g, h)                                               \
	((uint64_t)(uint8_t)(a) | (uint64_t)(uint8_t)(b) << 8 | (uint64_t)(uint8_t)(c) << 16 | \
	 (uint64_t)(uint8_t)(d) << 24 | (uint64_t)(uint8_t)(e) << 32 |                         \
	 (uint64_t)(uint8_t)(f) << 40 | (uint64_t)(uint8_t)(g) << 48 | (uint64_t)(uint8_t)(h) << 56)
#define X4B_PACK8(...) X4B_PACK8_(__VA_ARGS__)
#define X4B_IQ4NL_LO X4B_PACK8(X4B_IQ4NL_CODES_LO)
#define X4B_IQ4NL_HI X4B_PACK8(X4B_IQ4NL_CODES_HI)

/* ---- scalars ---- */

X4B_FN float x4b_bits_f32(uint32_t u)
{
	union {
		uint32_t u;
		float f;
	} v;
	v.u = u;
	return v.f;
}

/* fp16 to float, exactly (a NaN keeps its payload). */
X4B_FN float x4b_f16(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	if (exp == 0x1f) /* inf, or NaN with its payload kept */
		return x4b_bits_f32(sign | 0x7f800000u | man << 13);
	if (exp == 0) { /* zero or subnormal: man * 2^-24 is exact in float */
		const float v = (float)man * 0x1p-24f;
		return sign ? -v : v;
	}
	return x4b_bits_f32(sign | (exp + 112) << 23 | man << 13);
}

X4B_FN float x4b_bf16(uint16_t h) { return x4b_bits_f32((uint32_t)h << 16); }

/* The little-endian fp16 at p (any alignment). */
X4B_FN float x4b_f16_at(const uint8_t *p) { return x4b_f16((uint16_t)(p[0] | p[1] << 8)); }

/* ---- one block each: b the block's bytes, y its values ---- */

/* Q8_0: fp16 d, then 32 int8 codes; value = d * code. */
X4B_FN void x4b_decode_q8_0(const uint8_t *b, float *y)
{
	const float d = x4b_f16_at(b);
	for (int i = 0; i < 32; i++)
		y[i] = d * (float)(int8_t)b[2 + i];
}

/* IQ4_NL: fp16 d, then 16 bytes of codes, value j in byte j's low nibble
 * and value j + 16 in its high one; value = d * codebook[code]. */
X4B_FN void x4b_decode_iq4nl(const uint8_t *b, float *y)
{
	const float d = x4b_f16_at(b);
	/* the codebook as floats: the CPU trunk's inner loop */
	static const float k[16] = { X4B_IQ4NL_CODES_LO, X4B_IQ4NL_CODES_HI };
	for (int j = 0; j < 16; j++) {
		y[j] = d * k[b[2 + j] & 15];
		y[j + 16] = d * k[b[2 + j] >> 4];
	}
}

/* Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), 16 int8 scales, fp16 d.
 * Each half of 128 values takes 64 bytes of ql and 32 of qh; value =
 * (d * scale[e / 16]) * (code - 32).  The codes are unpacked first and
 * scaled after, sixteen values a scale: two loops the compiler vectorizes. */
X4B_FN void x4b_decode_q6k(const uint8_t *b, float *y)
{
	const float d = x4b_f16_at(b + 208);
	const int8_t *sc = (const int8_t *)(b + 192);
	int8_t q[256]; /* codes - 32, in value order */
	for (int h = 0; h < 2; h++) {
		const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
		int8_t *o = q + 128 * h;
		for (int l = 0; l < 32; l++) {
			o[l] = (int8_t)(((ql[l] & 15) | (qh[l] & 3) << 4) - 32);
			o[l + 32] = (int8_t)(((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) - 32);
			o[l + 64] = (int8_t)(((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32);
			o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32);
		}
	}
	for (int g = 0; g < 16; g++) {
		const float ds = d * (float)sc[g];
		for (int j = 0; j < 16; j++)
			y[16 * g + j] = ds * (float)q[16 * g + j];
	}
}

/* Q4_K: fp16 d and dmin, 12 bytes holding eight 6-bit scales and mins,
 * then 128 bytes of nibbles: bytes 32i.. hold sub-block 2i in the low
 * nibbles and 2i+1 in the high ones; value = (d * sc) * q - dmin * m. */
X4B_FN void x4b_decode_q4k(const uint8_t *b, float *y)
{
	const float d = x4b_f16_at(b), dmin = x4b_f16_at(b + 2);
	const uint8_t *s = b + 4, *qs = b + 16;
	for (int j = 0; j < 8; j++) {
		int sc, m;
		if (j < 4) {
			sc = s[j] & 63;
			m = s[j + 4] & 63;
		} else {
			sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
			m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
		}
		const float d1 = d * (float)sc, m1 = dmin * (float)m;
		const uint8_t *q = qs + 32 * (j / 2);
		const int shift = 4 * (j & 1);
		for (int l = 0; l < 32; l++)
			y[32 * j + l] = d1 * (float)((q[l] >> shift) & 15) - m1;
	}
}

/* n values (a multiple of the type's block) of a row of any type above;
 * the caller has checked n.  0, or X4_EINVAL for a type this switch has no
 * case for (a format added to the table but not here), y then untouched. */
X4B_FN int x4b_decode_row(int type, const void *src, float *y, uint64_t n)
{
	const uint8_t *b = (const uint8_t *)src;
	const uint64_t be = (uint64_t)x4b_block_elems(type), bb = (uint64_t)x4b_block_bytes(type);
	uint64_t i;
	switch (type) {
	case X4_T_F32: /* little-endian, as every machine x4 builds for */
		memcpy(y, b, (size_t)n * 4);
		break;
	case X4_T_F16:
		for (i = 0; i < n; i++, b += 2)
			y[i] = x4b_f16_at(b);
		break;
	case X4_T_BF16:
		for (i = 0; i < n; i++, b += 2)
			y[i] = x4b_bf16((uint16_t)(b[0] | b[1] << 8));
		break;
	case X4_T_Q8_0:
		for (i = 0; i < n; i += be, b += bb)
			x4b_decode_q8_0(b, y + i);
		break;
	case X4_T_Q4_K:
		for (i = 0; i < n; i += be, b += bb)
			x4b_decode_q4k(b, y + i);
		break;
	case X4_T_Q6_K:
		for (i = 0; i < n; i += be, b += bb)
			x4b_decode_q6k(b, y + i);
		break;
	case X4_T_IQ4_NL:
		for (i = 0; i < n; i += be, b += bb)
			x4b_decode_iq4nl(b, y + i);
		break;
	default:
		return X4_EINVAL;
	}
	return 0;
}

#endif
