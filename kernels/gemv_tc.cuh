/*
 * gemv_tc.cuh - batch-1 IQ4_NL matrix-vector products on the tensor cores
 * (sm_80 and later), the decode step's: the routed experts (gate and up
 * with the SwiGLU product, moe_experts.cu's x4k_moe_experts_sum; then the
 * downs with the weighted top-k sum and the shared expert's down), and the
 * plain and SwiGLU products (gemv_quant.cu's x4k_gemv, x4k_gemv_swiglu).
 * The library takes the tc8 core below with 256 values of k a warp (NG 1;
 * 512, NG 2, where k needs more than 20 warps), under the products' switch
 * (x4k_gemm_mma_set, the trunk's --gemm); everything else runs the
 * register core of quant_dev.cuh.  The kernel lab (bench/kernels/tcv.cu)
 * times both cores at both NG against the register core and checks them
 * against float64 (bench/RESULTS.md 26).
 *
 * The weights are the library's rows (lib/blockfmt.h: 18-byte blocks, fp16
 * d then 16 bytes of nibbles, value j in byte j's low nibble and j + 16 in
 * its high one; rows contiguous).  The IQ4_NL codebook values are int8,
 * exact in fp16 and in s8, so a code is an MMA operand as it is; x is the
 * other operand, carried to fp32 accuracy in one of two ways (the two cores):
 *
 *   tc16: mma.sync m16n8k16 (fp16 in, fp32 accumulate).  A = 16 rows x 16
 *     codes; B = x * s split into two fp16 terms, hi in column 0 and lo in
 *     column 1 (x * s = hi + lo, s a power of two a warp's slice with
 *     max|x * s| in [2^14, 2^15): docs/numerics.md 1.7's split of the query,
 *     ~22 bits), the other six columns zero.  Two MMAs a 32-value block,
 *     from zero; then acc = fma(d, hi + lo, acc) in fp32.  A code becomes
 *     fp16 by the codebook lookup yielding code + 128 as a byte, a PRMT
 *     putting it under 0x64 (the fp16 1024 + byte) and an HSUB2 of 1152.
 *   tc8: mma.sync m16n8k32 (s8 in, s32 accumulate).  A = 16 rows x 32 codes
 *     (the lookup's int8 bytes, no conversion at all); B = x * s rounded to
 *     an integer of at most 2^30 (s a power of two a slice) as four signed
 *     8-bit limbs, limb 3 - c in column c.  The 32 products of a block and
 *     their sum are exact integers; V = 256 * c0 + c1 (two limbs a lane, in
 *     int32), acc = fma(d, float(V), acc), and the two lanes' sums meet at
 *     the end as 65536 * acc_hi + acc_lo.  x is kept to 2^-30 of its slice's
 *     largest value; the products and the block's sum lose nothing.
 *
 * Layout.  A block takes 16 output rows (the MMA's M) of MT matrices and the
 * whole k, split over its warps in ranges of NG groups (a group: 8 blocks
 * of a row, 144 bytes, nine 16-byte lines, 16-byte aligned as the model's
 * rows are; NG 2 is 512 values a warp, NG 1 256 and twice the warps).  The
 * block copies all of its weight bytes at once with cp.async (stage_block,
 * the default of x4k_tc_copy_set): a tile's 16 rows are one contiguous
 * span, so consecutive threads copy consecutive 16-byte chunks, each into
 * the buffer of the warp whose k range holds it, and a warp's copy is 512
 * contiguous bytes; the block waits for all of them behind one barrier.
 * Each warp copying only its own slice (stage: two 16-byte lines of each
 * of 16 rows a copy instruction, a commit group a group, so that a warp
 * starts on its first group while the later ones are in flight) is the
 * comparison arm: the block copy priced 1.033x of the step at 512 tokens
 * of context, 1.032x at 4,096 (bench/RESULTS.md 34).  Its slice of x is
 * copied first where x comes after the dependency wait anyway (the
 * experts: the route table is an activation), so that it is not queued
 * behind the weights (x loaded after the weights' copies instead cost
 * 0.8%: bench/RESULTS.md 35); the dense products issue their weights
 * before the wait (pdl.cuh) and load x after it, and so do the shared
 * expert's gate and up, a dense column of blocks in the routed experts'
 * launch (one launch fewer a MoE layer; its blocks stream while the routed
 * ones wait for the route table: 1.011x of the step at 512,
 * bench/RESULTS.md 36).  At the batch-1 step the routed blocks wait for
 * the router's scores instead of a selection launch: a block's warp 0 runs
 * the router's top k (moe_route_dev.cuh) and shares its tile's expert, and
 * the first block writes the selection and the table for the down (one
 * launch fewer a MoE layer: 1.023x of the step at 512, 1.028x at 4,096,
 * bench/RESULTS.md 37; one warp a block rather than all, bench/RESULTS.md
 * 42).  The warp builds its B fragments in shared memory,
 * runs the MMAs group by group, and the warps' per-row sums are added
 * through shared memory in warp order (no atomics: the same bits every
 * run); the block's
 * epilogue writes the SwiGLU product, the plain sum or the weighted top-k
 * sum.
 *
 * Instructions (SASS of sm_90, static counts of the unrolled loop, a lane's
 * share of 512 weights a block a tile): tc8 37 a block-tile, 2.3 a weight
 * (the lookup 1.4, the epilogue's IMAD, I2FP, FFMA and d's HADD2 0.5, the
 * shared-memory words 0.3, the MMA); tc16 53, 3.3 a weight (the fp16
 * conversion adds a PRMT and an HSUB2 for every two codes); before the
 * loop, the copies, x and the B build add 0.7 - 1.1 a weight with two
 * tiles (gate and up), 1.4 - 2.4 with one.  The library's register core is
 * about 4.4 a weight in its loop (quant_dev.cuh).
 *
 * The k permutation.  A 32-value block's two 16-value MMA halves (tc16) or
 * its one 32-value MMA (tc8) may take its values in any order, so long as
 * A and B agree.  Lane t (of the four lanes of a fragment row) takes four
 * whole bytes of the block's 16 nibble bytes, 8 codes, from the staged
 * 36-byte pair of blocks [d0 q0 (16) d1 q1 (16)] read as nine aligned
 * words w0..w8: the odd block's bytes 4t..4t+3 are w5+t; the even block's
 * are w_t for t > 0 (bytes 4t-2 .. 4t+1) and, for t = 0, the last two
 * bytes of w0 with the first two of w4 (bytes 0, 1, 14, 15), one PRMT.
 * d0 is w0's low half and d1 w4's high half.  lane_byte() is the map; the
 * B build and the host's emulation of the fragments (tcv.cu) use it too.
 * The staged rows are 36 words apart, so the 32 lanes' words fall on 32
 * different banks.
 *
 * sm_80 and later (cp.async, mma.sync): built for an older arch the kernels
 * are empty, and the launchers, which check the device on the host, leave
 * the product to the register core.
 */
#ifndef X4_GEMV_TC_CUH
#define X4_GEMV_TC_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include <atomic>

#include "x4.h"
#include "x4_kern.h"
#include "blockfmt.h"
#include "quant_dev.cuh"
#include "mma_dev.cuh"
#include "pdl.cuh"
#include "moe_route_dev.cuh"

#ifdef X4_TCV_TRACE
#include <errno.h> /* the stamp file's writer (tcv_trace_write) */
#include <stdio.h>
#endif

namespace tcv {
using namespace x4m;

#define TCV_HD __host__ __device__ __forceinline__
/* #pragma unroll inside host-and-device code, which the host compiler
 * would warn about */
#ifdef __CUDA_ARCH__
#define TCV_UNROLL _Pragma("unroll")
#else
#define TCV_UNROLL
#endif

constexpr int ROWS = 16;        /* output rows a block: the MMA's M */
constexpr int GROUP_QB = 8;     /* 32-value blocks a group */
constexpr int GROUP_BYTES = 144;
constexpr int ROWW = 36;        /* words a staged row of a group */
constexpr int QB_BW = 32;       /* B words a block (either core) */

/* Byte permute: byte i of the result is byte (nibble i of s) & 7 of {b, a}.
 * On the device the PTX prmt itself, not __byte_perm, which masks the
 * selector with 0x7777 first (a LOP3 at every use the compiler cannot prove
 * away); so every selector here has bit 3 of its four low nibbles clear
 * (prmt would sign-fill the byte) and its high 16 bits are ignored.  The
 * host's emulation implements the same. */
TCV_HD uint32_t perm(uint32_t a, uint32_t b, uint32_t s)
{
#ifdef __CUDA_ARCH__
	uint32_t r;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
	return r;
#else
	const uint64_t v = (uint64_t)b << 32 | a;
	uint32_t r = 0;
	for (int i = 0; i < 4; i++) {
		const uint32_t n = (s >> (4 * i)) & 15;
		if (n & 8) /* never given here: prmt's sign fill, kept honest */
			r |= (uint32_t)((v >> (8 * (n & 7)) & 0x80u) ? 0xffu : 0u) << (8 * i);
		else
			r |= (uint32_t)(v >> (8 * n) & 0xffu) << (8 * i);
	}
	return r;
#endif
}

/* The codebook (lib/blockfmt.h) as four words of bytes, codes 0..3, 4..7,
 * 8..11, 12..15; bias8 0 for the int8 values, 0x80 on every byte for the
 * value + 128 (as quant_dev.cuh's iq4_consts).  zero: or-ed in, an opaque
 * zero on the device, so the words are registers and not constants a PRMT
 * would rematerialise at every use. */
struct iq4_tab {
	uint32_t t0, t1, t2, t3, sel; /* sel: the select's byte order, 0x32103210 */
};

TCV_HD iq4_tab iq4_tab_of(uint64_t bias8, uint32_t zero)
{
	const uint64_t lo = X4B_IQ4NL_LO ^ bias8, hi = X4B_IQ4NL_HI ^ bias8;
	return { (uint32_t)lo | zero, (uint32_t)(lo >> 32) | zero, (uint32_t)hi | zero,
		 (uint32_t)(hi >> 32) | zero, 0x32103210u | zero };
}

/* (a & b) | c, one LOP3 on the device (left to itself the compiler folds
 * c's constant back into two) */
TCV_HD uint32_t and_or(uint32_t a, uint32_t b, uint32_t c)
{
#ifdef __CUDA_ARCH__
	uint32_t r;
	asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
	return r;
#else
	return (a & b) | c;
#endif
}

/* The table bytes of the 8 codes of w, byte by byte, low nibble first: lo
 * gets those of bytes 0 and 1 (codes of values j0, j0 + 16, j1, j1 + 16 of
 * the word's bytes j0, j1), hi those of bytes 2 and 3.  quant_dev.cuh's
 * iq4_lookup4 for a whole word, its two selectors formed once: two PRMTs
 * pick by a code's low 3 bits from the lower and upper 8 entries, a third
 * by its bit 3.  11 instructions for 8 codes (the select's byte order in a
 * register lets one LOP3 form its selector). */
TCV_HD void iq4_lookup8(uint32_t w, const iq4_tab &k, uint32_t &lo, uint32_t &hi)
{
	const uint32_t m = w & 0x77777777u, s = and_or(w >> 1, 0x44444444u, k.sel);
	lo = perm(perm(k.t0, k.t1, m), perm(k.t2, k.t3, m), s);
	hi = perm(perm(k.t0, k.t1, m >> 16), perm(k.t2, k.t3, m >> 16), s >> 16);
}

/* The nibble byte (0..15 of the block's 16) that byte i of lane t's word
 * holds, for an even (odd 0) or odd block of a pair: the k permutation. */
TCV_HD int lane_byte(int t, int i, int odd)
{
	if (odd)
		return 4 * t + i;
	if (t == 0)
		return i < 2 ? i : 12 + i;
	return 4 * t - 2 + i;
}

/* PRMT selector of lane t's even-block word from w_t (E) and w4 (F). */
TCV_HD uint32_t even_sel(int t) { return t ? 0x3210u : 0x5432u; }

/* Word offset of row r (0..15) of tile mt, group s, in a warp's buffer of
 * MT tiles: [group][tile][row][36 words]. */
TCV_HD int wrow(int MT, int s, int mt, int r) { return ((s * MT + mt) * ROWS + r) * ROWW; }

/* Lane t's code word and the fp16 bits of d for block 2p + odd of the
 * staged row at q (36 words).  d0_word: take d0 from w0 (every lane; tc8's
 * lanes 0 and 1 need it), else from E (lane t = 0's own w0; tc16). */
TCV_HD void row_word(const uint32_t *q, int p, int odd, int t, bool d0_word, uint32_t &w, uint32_t &dbits)
{
	const uint32_t *pp = q + 9 * p;
	const uint32_t f = pp[4];
	if (!odd) {
		const uint32_t e = pp[t];
		w = perm(e, f, even_sel(t));
		dbits = (d0_word ? pp[0] : e) & 0xffffu;
	} else {
		w = pp[5 + t];
		dbits = f >> 16;
	}
}

/* The signed 8-bit limbs of v (|v| <= 2^30) as the bytes of a word, limb 0
 * lowest: v = sum l_i 256^i with l_0..l_2 in [-128, 127].  With u = v +
 * 0x808080 = sum u_i 256^i (u_0..u_2 in [0, 255]), l_i = u_i - 128, whose
 * byte is u_i ^ 0x80; l_3 is u's top byte as it is. */
TCV_HD uint32_t limbs(int32_t v) { return ((uint32_t)v + 0x808080u) ^ 0x808080u; }

/* Bytes k of u0..u3 as word k (a 4 x 4 byte transpose, 8 PRMTs). */
TCV_HD void transpose4(uint32_t u0, uint32_t u1, uint32_t u2, uint32_t u3, uint32_t (&l)[4])
{
	const uint32_t p = perm(u0, u1, 0x5140u), q = perm(u2, u3, 0x5140u);
	const uint32_t p2 = perm(u0, u1, 0x7362u), q2 = perm(u2, u3, 0x7362u);
	l[0] = perm(p, q, 0x5410u), l[1] = perm(p, q, 0x7632u);
	l[2] = perm(p2, q2, 0x5410u), l[3] = perm(p2, q2, 0x7632u);
}

/* x * s rounded to the nearest integer, ties to even */
TCV_HD int32_t rint_i(float v)
{
#ifdef __CUDA_ARCH__
	return __float2int_rn(v);
#else
	return (int32_t)nearbyintf(v);
#endif
}

/* 2^k, k in [-126, 127] */
TCV_HD float pow2(int k)
{
#ifdef __CUDA_ARCH__
	return pow2f(k);
#else
	return ldexpf(1.f, k);
#endif
}

/* ---- tc16: B = x * s as hi and lo, A = the codes as fp16 ----
 * A block's 32 B words: lane l = 4g + t < 8 holds 4 (a uint4): b0 and b1 of
 * the block's two MMA halves, column g (0 hi, 1 lo).  Word r of lane t
 * covers values j = lane_byte(t, r) and j + 16, the pair A's decode gives:
 * the lookup's bytes 0, 1 (of lo) are values j0, j0 + 16 and go to a0 of
 * the first half, bytes 2, 3 (j1, j1 + 16) to its a2; hi's to the second
 * half.  The B words a warp builds: CPL (block, t, r) a lane, lane l taking
 * t = l % 4 and the blocks l / 4 + 8q, all of one parity, so that its
 * nibble offsets are constants once the loops are unrolled. */
template <int NG> struct b16 {
	enum { RW = 4, CPL = RW * NG };
	float a[CPL], b[CPL]; /* x at j and j + 16 */
	static TCV_HD void of(int lane, int i, int &qb, int &t, int &r)
	{
		qb = (lane >> 2) + GROUP_QB * (i / RW), t = lane & 3, r = i % RW;
	}
	static TCV_HD int word(int qb, int g, int t, int r) { return qb * QB_BW + (4 * g + t) * 4 + r; }
	/* the lane's values of x (the warp's slice) */
	TCV_HD void load(const float *__restrict__ x, int lane)
	{
TCV_UNROLL
		for (int i = 0; i < CPL; i++) {
			int qb, t, r;
			of(lane, i, qb, t, r);
			const int j = qb * 32 + lane_byte(t, r, qb & 1);
			a[i] = x[j], b[i] = x[j + 16];
		}
	}
	/* their largest |x|, apart from the loads so that a caller can issue
	 * other loads between */
	TCV_HD float max() const
	{
		float m = 0.f;
TCV_UNROLL
		for (int i = 0; i < CPL; i++)
			m = fmaxf(m, fmaxf(fabsf(a[i]), fabsf(b[i])));
		return m;
	}
	static TCV_HD int scale_exp(float m) { return q_scale_exp(m); }
	TCV_HD void store(uint32_t *B, int lane, float s) const
	{
TCV_UNROLL
		for (int i = 0; i < CPL; i++) {
			int qb, t, r;
			of(lane, i, qb, t, r);
			__half ah, al, bh, bl;
			split_h(a[i] * s, ah, al);
			split_h(b[i] * s, bh, bl);
			B[word(qb, 0, t, r)] = pack_h2(ah, bh);
			B[word(qb, 1, t, r)] = pack_h2(al, bl);
		}
	}
};

/* Two codes as fp16: byte pair sel (0x5140: bytes 0, 1; 0x7362: 2, 3) of
 * r (each a code + 128) under 0x64 (fp16 1024 + the byte), less 1152. */
TCV_HD uint32_t codes_h2(uint32_t r, uint32_t magic, uint32_t sel)
{
	const uint32_t v = perm(r, magic, sel);
#ifdef __CUDA_ARCH__
	__half2 h;
	memcpy(&h, &v, 4);
	h = __hsub2(h, __half2half2(__ushort_as_half((unsigned short)0x6480u))); /* 1152 */
	uint32_t o;
	memcpy(&o, &h, 4);
	return o;
#else
	const __half lo = __float2half_rn(x4b_f16((uint16_t)(v & 0xffffu)) - 1152.f);
	const __half hi = __float2half_rn(x4b_f16((uint16_t)(v >> 16)) - 1152.f);
	return pack_h2(lo, hi);
#endif
}

/* A of a block's two MMA halves for rows g (word wg) and g + 8 (wh). */
TCV_HD void a16(uint32_t wg, uint32_t wh, const iq4_tab &k, uint32_t magic, uint32_t (&a0)[4], uint32_t (&a1)[4])
{
	uint32_t lg, hg, lh, hh;
	iq4_lookup8(wg, k, lg, hg);
	iq4_lookup8(wh, k, lh, hh);
	a0[0] = codes_h2(lg, magic, 0x5140u), a0[1] = codes_h2(lh, magic, 0x5140u);
	a0[2] = codes_h2(lg, magic, 0x7362u), a0[3] = codes_h2(lh, magic, 0x7362u);
	a1[0] = codes_h2(hg, magic, 0x5140u), a1[1] = codes_h2(hh, magic, 0x5140u);
	a1[2] = codes_h2(hg, magic, 0x7362u), a1[3] = codes_h2(hh, magic, 0x7362u);
}

/* A row's accumulator after a block: columns hi (c0) and lo (c1) */
TCV_HD float epi16(float d, float c0, float c1, float acc) { return fmaf(d, c0 + c1, acc); }

/* ---- tc8: B = x * s as four 8-bit limbs, A = the codes as int8 ----
 * A block's 32 B words: lane l = 4c + t < 16 holds 2 (a uint2), b0 and b1
 * of column c: limb 3 - c of the values lane_byte(t, 2r), + 16,
 * lane_byte(t, 2r + 1), + 16 (word r), a byte each in that order (the
 * order of the lookup's bytes). */
template <int NG> struct b8 {
	enum { RW = 2, CPL = RW * NG };
	float v[CPL][4];
	static TCV_HD void of(int lane, int i, int &qb, int &t, int &r)
	{
		qb = (lane >> 2) + GROUP_QB * (i / RW), t = lane & 3, r = i % RW;
	}
	static TCV_HD int word(int qb, int c, int t, int r) { return qb * QB_BW + (4 * c + t) * 2 + r; }
	TCV_HD void load(const float *__restrict__ x, int lane)
	{
TCV_UNROLL
		for (int i = 0; i < CPL; i++) {
			int qb, t, r;
			of(lane, i, qb, t, r);
			const int ja = qb * 32 + lane_byte(t, 2 * r, qb & 1), jb = qb * 32 + lane_byte(t, 2 * r + 1, qb & 1);
			v[i][0] = x[ja], v[i][1] = x[ja + 16], v[i][2] = x[jb], v[i][3] = x[jb + 16];
		}
	}
	TCV_HD float max() const
	{
		float m = 0.f;
TCV_UNROLL
		for (int i = 0; i < CPL; i++)
TCV_UNROLL
			for (int q = 0; q < 4; q++)
				m = fmaxf(m, fabsf(v[i][q]));
		return m;
	}
	/* max|x| * 2^k in [2^29, 2^30): |v| < 2^30, so v + 0x808080 stays in int32 */
	static TCV_HD int scale_exp(float m)
	{
		int e;
		frexpf(m, &e);
		e = e < -96 ? -96 : e > 100 ? 100 : e;
		return 30 - e;
	}
	TCV_HD void store(uint32_t *B, int lane, float s) const
	{
TCV_UNROLL
		for (int i = 0; i < CPL; i++) {
			int qb, t, r;
			of(lane, i, qb, t, r);
			uint32_t l[4];
			transpose4(limbs(rint_i(v[i][0] * s)), limbs(rint_i(v[i][1] * s)), limbs(rint_i(v[i][2] * s)),
				   limbs(rint_i(v[i][3] * s)), l);
TCV_UNROLL
			for (int c = 0; c < 4; c++)
				B[word(qb, c, t, r)] = l[3 - c];
		}
	}
};

/* A of a block's MMA (m16n8k32: a0, a2 row g, a1, a3 row g + 8). */
TCV_HD void a8(uint32_t wg, uint32_t wh, const iq4_tab &k, uint32_t (&a)[4])
{
	iq4_lookup8(wg, k, a[0], a[2]);
	iq4_lookup8(wh, k, a[1], a[3]);
}

/* A row's accumulator after a block: columns 2t, 2t + 1 are limbs 3 - 2t,
 * 2 - 2t (|c| < 2^19: V < 2^28 in int32, rounded once to float) */
TCV_HD float epi8(float d, int c0, int c1, float acc) { return fmaf(d, (float)(c0 * 256 + c1), acc); }

/* lane t = 0's limbs 3, 2 and lane t = 1's limbs 1, 0 of a row's sum */
TCV_HD float join8(float hi, float lo) { return fmaf(hi, 65536.f, lo); }

/* ======================= device ======================= */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* d = A . B + d, s8 in, s32 accumulate */
__device__ __forceinline__ void mma16832_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* cp.async.wait_group n for a count known once loops are unrolled */
__device__ __forceinline__ void cp_async_wait_n(int n)
{
	switch (n) {
	case 0: cp_async_wait<0>(); break;
	case 1: cp_async_wait<1>(); break;
	case 2: cp_async_wait<2>(); break;
	case 3: cp_async_wait<3>(); break;
	default: cp_async_wait<0>(); break;
	}
}

/* The warp's B words from the values bb loaded (its slice of x); returns
 * 1/s. */
template <class BUILD>
__device__ __forceinline__ float build_b(const BUILD &bb, uint32_t *B, int lane)
{
	const int e = BUILD::scale_exp(x4c::warp_max(bb.max()));
	bb.store(B, lane, pow2f(e));
	return pow2f(-e);
}

#endif /* __CUDA_ARCH__ >= 800 */

/* The kernel lab's timeline of the MoE launches (bench/kernels/moe_trace.cu
 * defines X4_TCV_TRACE before it includes this header; the library never
 * does, and its kernels compile to the same instructions with the stamps
 * gone): thread 0 of a block writes %globaltimer and clock64 at stamp i of
 * its phases into its TRACE_WORDS words of tcv_trace_gu (the gate/up) or
 * tcv_trace_dn (the down): globaltimer at word i (stamps 0-7), clock64 at
 * 8 + i, and its SM id at word 15. */
#ifdef X4_TCV_TRACE
constexpr int TRACE_WORDS = 16;
__device__ unsigned long long *tcv_trace_gu, *tcv_trace_dn;
__device__ __forceinline__ void tcv_stamp(unsigned long long *buf, int i)
{
#ifdef __CUDA_ARCH__
	if (!buf || threadIdx.x != 0)
		return;
	unsigned long long g;
	unsigned smid;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
	asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
	unsigned long long *b =
		buf + (((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * TRACE_WORDS;
	b[i] = g, b[8 + i] = (unsigned long long)clock64(), b[15] = smid;
#endif
}
#define TCV_STAMP_GU(i) tcv_stamp(tcv_trace_gu, i)
#define TCV_STAMP_DN(i) tcv_stamp(tcv_trace_dn, i)
/* The stamp file's one writer (a trace build's X4_MOE_TRACE file and the
 * lab's moe_trace-CONFIG.tsv; bench/moe_step_trace.py reads it): a line a
 * stamped block of the n_gu gate/up and n_dn down blocks' host copies,
 * "gate_up" or "down", the block, its TRACE_WORDS words.  Written to a
 * temporary file renamed over path: whole or not at all; false (errno
 * kept) when it was not written. */
inline bool tcv_trace_write(const char *path, const unsigned long long *gu, size_t n_gu,
			    const unsigned long long *dn, size_t n_dn)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
		errno = ENAMETOOLONG;
		return false;
	}
	FILE *f = fopen(tmp, "w");
	bool ok = f != nullptr;
	for (int k = 0; ok && k < 2; k++) {
		const unsigned long long *h = k ? dn : gu;
		for (size_t b = 0, n = k ? n_dn : n_gu; b < n; b++) {
			if (!h[b * TRACE_WORDS] && !h[b * TRACE_WORDS + TRACE_WORDS - 1])
				continue;
			fprintf(f, "%s\t%zu", k ? "down" : "gate_up", b);
			for (int i = 0; i < TRACE_WORDS; i++)
				fprintf(f, "\t%llu", h[b * TRACE_WORDS + i]);
			fputc('\n', f);
		}
	}
	if (f) {
		ok = !ferror(f) && ok;
		ok = fclose(f) == 0 && ok;
	}
	ok = ok && rename(tmp, path) == 0;
	if (!ok) {
		const int err = errno;
		remove(tmp);
		errno = err;
	}
	return ok;
}
#else
#define TCV_STAMP_GU(i) ((void)0)
#define TCV_STAMP_DN(i) ((void)0)
#endif

/* ---- the two cores: a block of 16 rows into the accumulators ---- */

struct core16 {
	enum { BW = 4, BLANES = 8, D0_WORD = 0 };
	template <int NG> using build = b16<NG>;
	struct consts {
		iq4_tab k;
		uint32_t magic;
	};
	static __device__ __forceinline__ consts make(uint32_t zero)
	{
		return { iq4_tab_of(0x8080808080808080ull, zero), 0x64646464u | zero };
	}
	using bfrag = uint4;
	static __device__ __forceinline__ bfrag ldb(const uint32_t *p) { return *reinterpret_cast<const uint4 *>(p); }

	/* One block of rows g (code word wg, scale dg) and g + 8 into acc. */
	static __device__ __forceinline__ void block(const consts &c, uint32_t wg, uint32_t wh, float dg, float dh,
						     const bfrag &b, float (&acc)[2])
	{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
		uint32_t a0[4], a1[4];
		a16(wg, wh, c.k, c.magic, a0, a1);
		float d[4] = { 0.f, 0.f, 0.f, 0.f };
		mma16816(d, a0, b.x, b.y);
		mma16816(d, a1, b.z, b.w);
		acc[0] = epi16(dg, d[0], d[1], acc[0]);
		acc[1] = epi16(dh, d[2], d[3], acc[1]);
#endif
	}

	/* The warp's sum of a row, valid in the lanes t = 0 (every lane calls). */
	static __device__ __forceinline__ float finish(float acc, float inv) { return acc * inv; }
};

struct core8 {
	enum { BW = 2, BLANES = 16, D0_WORD = 1 };
	template <int NG> using build = b8<NG>;
	struct consts {
		iq4_tab k;
	};
	static __device__ __forceinline__ consts make(uint32_t zero) { return { iq4_tab_of(0, zero) }; }
	using bfrag = uint2;
	static __device__ __forceinline__ bfrag ldb(const uint32_t *p) { return *reinterpret_cast<const uint2 *>(p); }

	static __device__ __forceinline__ void block(const consts &c, uint32_t wg, uint32_t wh, float dg, float dh,
						     const bfrag &b, float (&acc)[2])
	{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
		uint32_t a[4];
		a8(wg, wh, c.k, a);
		int d[4] = { 0, 0, 0, 0 };
		mma16832_s8(d, a, b.x, b.y);
		acc[0] = epi8(dg, d[0], d[1], acc[0]);
		acc[1] = epi8(dh, d[2], d[3], acc[1]);
#endif
	}

	static __device__ __forceinline__ float finish(float acc, float inv)
	{
		return join8(acc, __shfl_down_sync(0xffffffffu, acc, 1)) * inv;
	}
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* Issue the copies of the warp's slice of x (NG * 256 values, 16-byte
 * aligned) into xs, one commit group ahead of the weights' (stage): x is
 * then not queued behind the weight traffic, which a load issued after it
 * would be (the compiler places ordinary loads after the copies). */
template <int NG>
__device__ __forceinline__ void stage_x(float *xs, const float *x, int lane)
{
	const uint32_t dst = smem_u32(xs) + 16 * lane;
#pragma unroll
	for (int i = 0; i < NG * GROUP_QB * 32 / 4 / 32; i++)
		cp_async16(dst + 512 * i, x + 4 * lane + 128 * i, 16);
	cp_async_commit();
}

/* Issue the copies of a warp's weights: MT tiles of 16 rows (rows0[mt]: row
 * 0 of tile mt at the warp's first group; rows rb bytes apart), NG groups,
 * one commit group a group, into buf ([group][tile][row][36 words]).  Lane
 * l copies row l % 16's lines l / 16, + 2, ... of the 9 a group: a warp's
 * copy takes two whole 16-byte lines (one 32-byte sector) of each row. */
template <int MT, int NG>
__device__ __forceinline__ void stage(uint32_t *buf, const uint8_t *const (&rows0)[MT], size_t rb, int lane)
{
	constexpr int LINES = GROUP_BYTES / 16; /* 9 a row a group */
	const int r = lane & 15, q0 = lane >> 4;
	const uint32_t dst = smem_u32(buf) + (uint32_t)(r * ROWW + 4 * q0) * 4;
	const size_t src = (size_t)r * rb + 16 * q0;
#pragma unroll
	for (int s = 0; s < NG; s++) {
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int i = 0; 2 * i < LINES; i++)
				if (q0 + 2 * i < LINES)
					cp_async16(dst + (uint32_t)(wrow(MT, s, mt, 0) + 8 * i) * 4,
						   rows0[mt] + src + (size_t)s * GROUP_BYTES + 32 * i, 16);
		cp_async_commit();
	}
}

/* The block-wide form of stage (the library's default; x4k_tc_copy_set):
 * the 16 rows of a tile are one contiguous span of 16 rb bytes (rows are
 * contiguous), copied 16 bytes a thread with consecutive threads on
 * consecutive chunks, so that a warp's copy is 512 contiguous bytes (four
 * whole lines) instead of 16 rows' 32-byte pieces.  Chunk c of tile mt:
 * row c / CPR, then the warp w0 + (c % CPR) / (9 NG) of its k range, its
 * group and line; into that warp's buffer (warp_words apart) at
 * wrow(MT, group, mt, row) as stage puts it.  One commit group a thread
 * (its copies serve other warps: the block waits for all, then a barrier).
 * The division a chunk is measured, not an oversight: a loop of one add a
 * copy put the block's requests out in a burst and lost 1.3-1.6% of the
 * step (0.987x at 512, 0.984x at 4,096); copying tile by tile, or in
 * phases that warps wait for apart (mbarriers), lost too (bench/RESULTS.md
 * 35). */
template <int MT, int NG>
__device__ __forceinline__ void stage_block(uint32_t *sm, size_t warp_words, int w0, const uint8_t *const (&rows0)[MT],
					    size_t rb)
{
	constexpr int LINES = GROUP_BYTES / 16;
	const int cpr = (int)(rb / 16), n = ROWS * cpr;
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
		for (int c = threadIdx.x; c < n; c += blockDim.x) {
			const int r = c / cpr, cc = c - r * cpr, w = cc / (LINES * NG), g = cc - w * (LINES * NG);
			const int s = g / LINES, j = g - s * LINES;
			const uint32_t *dst = sm + (size_t)(w0 + w) * warp_words + wrow(MT, s, mt, r) + 4 * j;
			cp_async16(smem_u32(dst), rows0[mt] + (size_t)c * 16, 16);
		}
}

/* The warp's sums of its MT tiles over its NG groups (staged in buf by
 * stage, B built in bp's array): out[mt][h], row g + 8h of tile mt, valid
 * in the lanes t = 0.  zero: a 0 the compiler cannot see (a load of the
 * zero array), or-ed into the codebook words so that they live in ordinary
 * registers; folded to constants, they would be moved from uniform
 * registers before every PRMT. */
template <class CORE, int MT, int NG>
__device__ __forceinline__ void tiles_dot(const uint32_t *buf, const uint32_t *bp, uint32_t zero, float inv,
					  float (&out)[MT][2], bool staged)
{
	const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const typename CORE::consts c = CORE::make(zero);
	float acc[MT][2];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
		acc[mt][0] = acc[mt][1] = 0.f;
#pragma unroll
	for (int s = 0; s < NG; s++) {
		if (!staged) {                       /* (staged: stage_block's, waited for by the block) */
			cp_async_wait_n(NG - 1 - s); /* this lane's copies of group s */
			__syncwarp();                /* and the warp's */
		}
#pragma unroll
		for (int p = 0; p < GROUP_QB / 2; p++)
#pragma unroll
			for (int odd = 0; odd < 2; odd++) {
				const int qb = s * GROUP_QB + 2 * p + odd;
				const typename CORE::bfrag b = CORE::ldb(bp + qb * QB_BW);
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					uint32_t w[2], db[2];
#pragma unroll
					for (int h = 0; h < 2; h++)
						row_word(buf + wrow(MT, s, mt, g + 8 * h), p, odd, t, CORE::D0_WORD, w[h],
							 db[h]);
					CORE::block(c, w[0], w[1], x4c::f16((uint16_t)db[0]), x4c::f16((uint16_t)db[1]), b,
						    acc[mt]);
				}
			}
	}
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int h = 0; h < 2; h++)
			out[mt][h] = CORE::finish(acc[mt][h], inv);
}
#endif /* __CUDA_ARCH__ >= 800 */

/* Shared memory of a block of nw warps, in words: each warp's weights
 * (WSL), B words (BSL) and slice of x (XSL), one zero array as long as a warp's B words
 * (the lanes past the core's B lanes read it), the warps' sums. */
template <int MT, int NG> struct smem_words {
	enum { WSL = NG * MT * ROWS * ROWW, BSL = QB_BW * GROUP_QB * NG, XSL = NG * GROUP_QB * 32,
	       WARP = WSL + BSL + XSL /* a warp's words */ };
	static constexpr size_t of(int nw)
	{
		return (size_t)nw * (WSL + BSL + XSL) + BSL + (size_t)nw * MT * ROWS;
	}
};

/* A block's carve-up: the warp's weights, B words and x, the zero array,
 * the sums; the lane's B pointer. */
template <class CORE, int MT, int NG> struct carve {
	uint32_t *w, *b, *zero;
	float *x;
	const uint32_t *bp;
	float *red;
	__device__ __forceinline__ carve(uint32_t *sm, int warp, int nw, int lane)
	{
		using S = smem_words<MT, NG>;
		w = sm + (size_t)warp * (S::WSL + S::BSL + S::XSL);
		b = w + S::WSL;
		x = reinterpret_cast<float *>(b + S::BSL);
		zero = sm + (size_t)nw * (S::WSL + S::BSL + S::XSL);
		red = reinterpret_cast<float *>(zero + S::BSL);
		bp = lane < CORE::BLANES ? b + lane * CORE::BW : zero;
	}
};

/* Zero the zero array (every thread of the block; a barrier follows). */
template <int NG>
__device__ __forceinline__ void zero_fill(uint32_t *zero)
{
	for (int i = threadIdx.x; i < QB_BW * GROUP_QB * NG; i += blockDim.x)
		zero[i] = 0u;
}

/* ---- the dense products and the routed gate/up: MT = 2 (gate, up) with
 * the SwiGLU product, or MT = 1 (a plain product).  Block: 16 rows, the
 * whole k over its warps (k = warps * NG * 256).  MOE: grid (f/16, tiles),
 * the tile's expert and route from the table (one route a tile), x of the
 * route's token, h rows in route-table order as x4k_moe_experts writes
 * them; with s0 set, one more column of blocks, the grid's first (y 0), is
 * the shared expert's gate and up of the one token, a dense block of the
 * same shape (its weights before the wait), into sy.  The blocks start in
 * that order: the shared expert's 64 first, so that at two blocks an SM
 * the second wave of the step's 320 is routed blocks that start as the
 * shared ones (no selection, their weights loaded before the wait) finish
 * first: 1.013x of the step at 512 tokens of context, 1.008x at 4,096,
 * against the shared column interleaved last in each row of tiles; last
 * in the launch 0.983x, 0.971x (bench/RESULTS.md 42).  Else grid n/16,
 * w0/w1 the matrices. */
struct rows_args {
	const uint8_t *w0, *w1; /* [n][k] (MOE: [n_expert][n][k]) */
	const float *x;         /* [k] (MOE: [n_tok][k]) */
	float *y;               /* [n] (MOE: [routes][n]) */
	int n, k;
	x4k_moe_routes r;       /* MOE only */
	x4k_moe_pick pk;        /* MOE only: with pk.bias, r holds the router's scores only (one
				 * token): each routed block selects for itself, block 0 writes
				 * the selection and the table */
	const uint8_t *s0, *s1; /* MOE only, may be NULL: the shared expert's gate and up, [n][k] */
	float *sy;              /* its SwiGLU product, [n] */
	bool blk;               /* stage_block (x4k_tc_copy_get), else each warp its own slice */
};

constexpr int MAX_THREADS = 32 * 20; /* the fused down of f 1024 in ranges of one group: 5 x 4 warps */
constexpr int PICK_J = 2; /* a routed block's own selection: up to 64 experts (two a lane) */

template <class CORE, int MT, int NG, bool MOE>
__global__ void __launch_bounds__(MAX_THREADS)
tc_rows_kernel(rows_args a)
{
	static_assert(MT == 1 || MT == 2, "a plain product or gate and up");
	static_assert(!MOE || MT == 2, "the routed experts' gate and up");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	extern __shared__ __align__(16) uint32_t sm[];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	const carve<CORE, MT, NG> cv(sm, warp, nw, lane);
	const size_t rb = x4d::row_bytes(X4_T_IQ4_NL, a.k);
	const int row0 = blockIdx.x * ROWS;
	const size_t koff = (size_t)warp * NG * GROUP_BYTES;
	const size_t xoff = (size_t)warp * NG * GROUP_QB * 32;
	float *y = a.y;
	typename CORE::template build<NG> bb;
	/* a routed tile's block (else a dense one: the shared expert's in an MOE grid) */
	const bool routed = MOE && !(a.s0 && blockIdx.y == 0);
	const uint8_t *base[2] = { MOE ? a.s0 : a.w0, MOE ? a.s1 : a.w1 }; /* the block's matrices */
	TCV_STAMP_GU(0);
	if (routed) { /* the table is an activation: wait first */
		const int m = (int)blockIdx.y - (a.s0 ? 1 : 0);
		float bv[PICK_J];
		if (a.pk.bias) /* a weight: before the wait */
			x4route::load_bias<PICK_J>(lane, a.r.n_expert, a.pk.bias, bv);
		if (a.pk.bias) {
			/* the down behind starts only once the scores are complete
			 * (it selects from them before its own wait) */
			x4p::wait();
			x4p::trigger();
		} else {
			x4p::trigger();
			x4p::wait();
		}
		TCV_STAMP_GU(1);
		int ex, start, tok;
		if (a.pk.bias) {
			/* one token: k tiles of one route each, tile m the pick of
			 * the m-th lowest expert id, its route id its slot (the
			 * table x4k_moe_select_table writes); warp 0 selects and the
			 * block reads its pick from shared memory (every warp
			 * selecting, 28 warps an SM on the same shuffles, took 2.9
			 * us of a block's time in the kernel lab: bench/RESULTS.md 42) */
			if (m >= a.r.k) /* uniform over the block, before any barrier */
				return;
			__shared__ int s_ex;
			if (warp == 0) {
				x4route::picks p;
				x4route::top_k<PICK_J>(lane, a.r.n_expert, a.r.k, a.r.score, bv, p);
				if (m == 0 && row0 == 0) {
					if (lane == 0)
						x4route::write_picks(p, a.r.k, a.pk.scale, a.pk.norm, a.r.sel, a.r.wts);
					__syncwarp(); /* sel, for the table */
					x4route::small_table<PICK_J>(a.r, lane);
				}
				if (lane == 0)
					s_ex = p.ex[x4route::tile_slot(p, a.r.k, m)];
			}
			__syncthreads();
			ex = s_ex, start = m, tok = 0;
		} else {
			if (m >= *a.r.n_tiles) /* uniform over the block, before any barrier */
				return;
			ex = a.r.tile_expert[m], start = a.r.tile_start[m], tok = a.r.route[start] / a.r.k;
		}
		TCV_STAMP_GU(2);
		stage_x<NG>(cv.x, a.x + (size_t)tok * a.k + xoff, lane);
		base[0] = a.w0 + (size_t)ex * a.n * rb;
		base[1] = a.w1 + (size_t)ex * a.n * rb;
		y += (size_t)start * a.n;
	} else if constexpr (MOE) {
		y = a.sy;
	}
	/* a dense block's weights before the wait: they do not depend on it */
	const size_t ko = a.blk ? 0 : koff;
	const uint8_t *rows0[MT];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
		rows0[mt] = base[mt] + (size_t)row0 * rb + ko;
	if (a.blk) {
		stage_block<MT, NG>(sm, smem_words<MT, NG>::WARP, 0, rows0, rb);
		cp_async_commit();
	} else {
		stage<MT, NG>(cv.w, rows0, rb, lane);
	}
	if (!routed) {
		x4p::trigger();
		x4p::wait();
		TCV_STAMP_GU(1);
		/* x after the weights, of necessity: loaded directly, since a copy
		 * behind theirs would complete only with all of them */
		bb.load(a.x + xoff, lane);
	}
	zero_fill<NG>(cv.zero);
	if (routed) {
		if (a.blk)
			cp_async_wait_n(1); /* x's copy, the older group */
		else
			cp_async_wait_n(NG);
		__syncwarp();
		bb.load(cv.x, lane);
	}
	const float inv = build_b(bb, cv.b, lane);
	if (a.blk) /* every thread's copies: they fill other warps' buffers */
		cp_async_wait<0>();
	__syncthreads(); /* the zero array; each warp's B words; (blk) the weights */
	TCV_STAMP_GU(3);
	float out[MT][2];
	tiles_dot<CORE, MT, NG>(cv.w, cv.bp, cv.zero[threadIdx.x & 31], inv, out, a.blk);
	TCV_STAMP_GU(4);
	if ((lane & 3) == 0)
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				cv.red[(warp * MT + mt) * ROWS + (lane >> 2) + 8 * h] = out[mt][h];
	__syncthreads();
	if (threadIdx.x < ROWS) {
		const int r = threadIdx.x;
		float s[MT];
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
			s[mt] = cv.red[mt * ROWS + r];
			for (int w = 1; w < nw; w++)
				s[mt] = __fadd_rn(s[mt], cv.red[(w * MT + mt) * ROWS + r]);
		}
		y[row0 + r] = MT == 2 ? x4d::silu(s[0]) * s[MT - 1] : s[0]; /* x4k_swiglu's expression */
	}
	TCV_STAMP_GU(5);
#endif
}

/* ---- one token's routed downs, the shared down and the weighted sum ----
 * y[row] = sum over the tiles (one route each, in ascending expert id: the
 * table's order) of wts * (W_down[ex][row] . h[route]), then + W_sdown[row]
 * . sh: x4k_moe_experts_sum's sum, in its order.  Block: 16 rows of the
 * SUM_NM matrices (SUM_NM - 1 routes and the shared down), warp w the
 * matrix w / KW and the k-range w % KW (f = KW * NG * 256); grid d / 16.
 * A matrix the call lacks (fewer routes, no shared down) leaves its warps
 * idle but at the barriers.  With pk.bias (the batch-1 step, whose routed
 * gate/up launch selects for itself and lets this launch start only once
 * the router's scores are complete) warp 0 runs the router's top k on the
 * scores before the wait, so that the routes' weights are copied before it
 * and only h waits: 1.029x of the step at 512 tokens of context, 1.027x at
 * 4,096 (bench/RESULTS.md 38).  Without it the routes come from the table,
 * after the wait. */
constexpr int SUM_NM = 5;

template <class CORE, int NG>
__global__ void __launch_bounds__(MAX_THREADS)
tc_down_sum_kernel(x4k_moe_routes r, x4k_moe_pick pk, int d, int f, const uint8_t *__restrict__ down,
		   const float *__restrict__ h, const uint8_t *__restrict__ sdown, const float *__restrict__ sh,
		   float *__restrict__ y, bool blk)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	extern __shared__ __align__(16) uint32_t sm[];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	const int KW = nw / SUM_NM, m = warp / KW, kw = warp % KW;
	const carve<CORE, 1, NG> cv(sm, warp, nw, lane);
	const size_t rb = x4d::row_bytes(X4_T_IQ4_NL, f);
	const int row0 = blockIdx.x * ROWS;
	/* each route's expert, h row and weight: with pk.bias selected here
	 * from the router's scores before the wait (the gate/up launch lets
	 * this one start only once they are complete), so that the weights'
	 * copies go out before it; else from the table after it */
	int nt, ex[SUM_NM - 1], hr[SUM_NM - 1];
	float wt[SUM_NM - 1];
	TCV_STAMP_DN(0);
	if (pk.bias) {
		/* warp 0 selects (the scores past L1: this is before the wait)
		 * and the block reads its picks from shared memory: one warp a
		 * block on the scores' two L2 lines, not every warp */
		__shared__ int s_ex[SUM_NM - 1];
		__shared__ float s_wt[SUM_NM - 1];
		if (warp == 0) {
			float bv[PICK_J];
			x4route::load_bias<PICK_J>(lane, r.n_expert, pk.bias, bv);
			x4route::picks p;
			x4route::top_k<PICK_J, true>(lane, r.n_expert, r.k, r.score, bv, p);
			const int slot = x4route::tile_slot(p, r.k, lane);
			if (lane < SUM_NM - 1) {
				s_ex[lane] = p.ex[slot];
				s_wt[lane] = x4route::weight(p, slot, pk.scale, pk.norm);
			}
		}
		__syncthreads();
		nt = min(r.k, SUM_NM - 1);
#pragma unroll
		for (int mm = 0; mm < SUM_NM - 1; mm++)
			ex[mm] = s_ex[mm], hr[mm] = mm, wt[mm] = s_wt[mm];
	} else {
		x4p::trigger();
		x4p::wait(); /* the table and h */
		nt = min(*r.n_tiles, SUM_NM - 1);
#pragma unroll
		for (int mm = 0; mm < SUM_NM - 1; mm++)
			ex[mm] = mm < nt ? r.tile_expert[mm] : 0, hr[mm] = mm < nt ? r.tile_start[mm] : 0;
	}
	const uint8_t *w = nullptr;
	const float *xv = nullptr;
	if (m < SUM_NM - 1) {
		if (m < nt) {
			w = down + (size_t)ex[m] * d * rb;
			xv = h + (size_t)hr[m] * f;
		}
	} else {
		w = sdown;
		xv = sh;
	}
	typename CORE::template build<NG> bb;
	if (pk.bias) { /* the weights first, then the wait, then x (h) */
		if (w && !blk) {
			const uint8_t *const rows0[1] = { w + (size_t)row0 * rb + (size_t)kw * NG * GROUP_BYTES };
			stage<1, NG>(cv.w, rows0, rb, lane);
		}
	} else if (w) { /* uniform over the warp; x first, as in tc_rows_kernel */
		stage_x<NG>(cv.x, xv + (size_t)kw * NG * GROUP_QB * 32, lane);
		if (!blk) {
			const uint8_t *const rows0[1] = { w + (size_t)row0 * rb + (size_t)kw * NG * GROUP_BYTES };
			stage<1, NG>(cv.w, rows0, rb, lane);
		}
	}
	if (blk) { /* every matrix the call has, by the whole block (stage_block) */
		for (int mm = 0; mm < SUM_NM; mm++) {
			const uint8_t *wm = mm < SUM_NM - 1 ? (mm < nt ? down + (size_t)ex[mm] * d * rb : nullptr) : sdown;
			if (wm) { /* uniform over the block */
				const uint8_t *const rows0[1] = { wm + (size_t)row0 * rb };
				stage_block<1, NG>(sm, smem_words<1, NG>::WARP, mm * KW, rows0, rb);
			}
		}
		cp_async_commit();
	}
	if (pk.bias) {
		x4p::trigger();
		x4p::wait(); /* h */
		TCV_STAMP_DN(1);
		if (w)
			stage_x<NG>(cv.x, xv + (size_t)kw * NG * GROUP_QB * 32, lane);
	}
	zero_fill<NG>(cv.zero);
	float inv = 0.f;
	if (w) {
		if (pk.bias)
			cp_async_wait<0>(); /* x's copy, the newest group */
		else if (blk)
			cp_async_wait_n(1); /* x's copy, the older group */
		else
			cp_async_wait_n(NG);
		__syncwarp();
		bb.load(cv.x, lane);
		inv = build_b(bb, cv.b, lane);
	}
	if (blk)
		cp_async_wait<0>();
	__syncthreads();
	TCV_STAMP_DN(3);
	if (w) {
		float out[1][2];
		tiles_dot<CORE, 1, NG>(cv.w, cv.bp, cv.zero[threadIdx.x & 31], inv, out, blk);
		if ((lane & 3) == 0) {
			cv.red[warp * ROWS + (lane >> 2)] = out[0][0];
			cv.red[warp * ROWS + (lane >> 2) + 8] = out[0][1];
		}
	}
	__syncthreads();
	if (threadIdx.x < ROWS) {
		const int i = threadIdx.x;
		auto dot = [&](int mm) {
			float t = cv.red[mm * KW * ROWS + i];
			for (int q = 1; q < KW; q++)
				t = __fadd_rn(t, cv.red[(mm * KW + q) * ROWS + i]);
			return t;
		};
		float acc = 0.f;
		/* the routes' weights from the table: the three dependent loads
		 * (start, route, weight) of every route at once, three round trips
		 * in all rather than three a route, one route after another
		 * (1.003x of the step, bench/RESULTS.md 35) */
		if (!pk.bias)
#pragma unroll
			for (int mm = 0; mm < SUM_NM - 1; mm++)
				wt[mm] = mm < nt ? r.wts[r.route[r.tile_start[mm]]] : 0.f;
#pragma unroll
		for (int mm = 0; mm < SUM_NM - 1; mm++)
			if (mm < nt)
				acc = __fmaf_rn(wt[mm], dot(mm), acc);
		if (sdown)
			acc = __fadd_rn(acc, dot(SUM_NM - 1));
		y[row0 + i] = acc;
	}
	TCV_STAMP_DN(5);
#endif
}

/* ======================= host ======================= */

/* Can the kernel take `bytes` of dynamic shared memory on the current
 * device: the opt-in allowing it, the attribute raised to it?  A CUDA
 * failure is cleared and reads as false.  set: the bytes the attribute
 * holds, per device (a kernel instance's own array). */
template <typename K>
static bool smem_optin(K kernel, size_t bytes, std::atomic<size_t> (&set)[64])
{
	int dev = 0, optin = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
		(void)cudaGetLastError();
		return false;
	}
	if (set[dev].load() >= bytes)
		return true;
	if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
	    (size_t)optin < bytes ||
	    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		return false;
	}
	set[dev].store(bytes);
	return true;
}

/* smem_optin on sm_80 or newer (x4m::enabled, which also reads the
 * library's switch, x4k_gemm_mma_set); false sends the caller to the
 * register core. */
template <typename K>
static bool smem_ready(K kernel, size_t bytes, std::atomic<size_t> (&set)[64])
{
	return x4m::enabled() && smem_optin(kernel, bytes, set);
}

/* The shapes the cores take: n % 16, k in whole ranges of NG groups over
 * at most MAX_THREADS / 32 warps (warps_a_range: the matrices sharing the
 * block), 16-byte aligned weights and x. */
template <int NG>
static inline bool shape_ok(int n, int k, int warps_a_range, const void *w, const void *x)
{
	const int per = NG * GROUP_QB * 32;
	return n > 0 && n % ROWS == 0 && k > 0 && k % per == 0 &&
	       k / per * warps_a_range <= MAX_THREADS / 32 && !((uintptr_t)w & 15) && !((uintptr_t)x & 15);
}

/* The launchers: each returns false, launching nothing, where the device,
 * the switch or the shape does not take the core (the caller then runs the
 * register core), else true with the launch's error left for
 * x4_cuda_launched (the MoE pair's with run false: true where it would
 * launch, nothing launched).  IQ4_NL weights, one token. */

/* y = W x (n x k). */
template <class CORE, int NG>
static bool gemv(const void *w, int n, int k, const float *x, float *y, cudaStream_t s)
{
	static std::atomic<size_t> set[64];
	if (!shape_ok<NG>(n, k, 1, w, x))
		return false;
	const int nw = k / (NG * GROUP_QB * 32);
	const size_t bytes = smem_words<1, NG>::of(nw) * 4;
	if (!smem_ready(tc_rows_kernel<CORE, 1, NG, false>, bytes, set))
		return false;
	rows_args a = {};
	a.w0 = static_cast<const uint8_t *>(w), a.x = x, a.y = y, a.n = n, a.k = k;
	a.blk = x4k_tc_copy_get();
	x4p::launch(tc_rows_kernel<CORE, 1, NG, false>, dim3(n / ROWS), dim3(32 * nw), bytes, s, a);
	return true;
}

/* h = silu(W_gate x) * (W_up x). */
template <class CORE, int NG>
static bool gemv_swiglu(const void *wg, const void *wu, int n, int k, const float *x, float *h, cudaStream_t s)
{
	static std::atomic<size_t> set[64];
	if (!shape_ok<NG>(n, k, 1, wg, x) || ((uintptr_t)wu & 15))
		return false;
	const int nw = k / (NG * GROUP_QB * 32);
	const size_t bytes = smem_words<2, NG>::of(nw) * 4;
	if (!smem_ready(tc_rows_kernel<CORE, 2, NG, false>, bytes, set))
		return false;
	rows_args a = {};
	a.w0 = static_cast<const uint8_t *>(wg), a.w1 = static_cast<const uint8_t *>(wu);
	a.x = x, a.y = h, a.n = n, a.k = k;
	a.blk = x4k_tc_copy_get();
	x4p::launch(tc_rows_kernel<CORE, 2, NG, false>, dim3(n / ROWS), dim3(32 * nw), bytes, s, a);
	return true;
}

/* The routed experts' gate and up with the SwiGLU product (x4k_moe_experts'
 * h: route-table row start of each tile, [f] each), tiles of one route;
 * with sgate, one token's shared expert too (its gate and up [f][d], its
 * product into sh): one more column of blocks. */
template <class CORE, int NG>
static bool moe_gu(const x4k_moe_routes *r, const x4k_moe_pick *pick, const float *x, int d, int f,
		   const void *gate, const void *up, float *h, const void *sgate, const void *sup, float *sh,
		   cudaStream_t s, bool run = true)
{
	static std::atomic<size_t> set[64];
	if (!shape_ok<NG>(f, d, 1, gate, x) || ((uintptr_t)up & 15) || (r->tile != 1 && r->n_tok != 1) ||
	    r->max_tiles < 1 || r->max_tiles >= 65535 || /* the grid's y: the tiles and the shared column */
	    (pick && (r->n_tok != 1 || r->max_tiles < r->k || r->n_expert > 32 * PICK_J)))
		return false;
	if (sgate && (!sup || !sh || r->n_tok != 1 || ((uintptr_t)sgate & 15) || ((uintptr_t)sup & 15)))
		return false;
	const int nw = d / (NG * GROUP_QB * 32);
	const size_t bytes = smem_words<2, NG>::of(nw) * 4;
	if (!smem_ready(tc_rows_kernel<CORE, 2, NG, true>, bytes, set))
		return false;
	if (!run)
		return true;
	rows_args a = {};
	a.w0 = static_cast<const uint8_t *>(gate), a.w1 = static_cast<const uint8_t *>(up);
	a.x = x, a.y = h, a.n = f, a.k = d, a.r = *r;
	if (pick)
		a.pk = *pick;
	a.s0 = static_cast<const uint8_t *>(sgate), a.s1 = static_cast<const uint8_t *>(sup), a.sy = sh;
	a.blk = x4k_tc_copy_get();
	x4p::launch(tc_rows_kernel<CORE, 2, NG, true>, dim3(f / ROWS, (unsigned)r->max_tiles + (sgate ? 1u : 0u)),
		    dim3(32 * nw), bytes, s, a);
	return true;
}

/* One token's y = sum of wts * down(h) over its routes + the shared down of
 * sh (sdown may be NULL): x4k_moe_experts_sum's second launch. */
template <class CORE, int NG>
static bool moe_down_sum(const x4k_moe_routes *r, const x4k_moe_pick *pick, int d, int f, const void *down,
			 const float *h, const void *sdown, const float *sh, float *y, cudaStream_t s,
			 bool run = true)
{
	static std::atomic<size_t> set[64];
	if (!shape_ok<NG>(d, f, SUM_NM, down, h) || r->n_tok != 1 || r->k > SUM_NM - 1 ||
	    (pick && r->n_expert > 32 * PICK_J) ||
	    ((uintptr_t)sdown & 15) || ((uintptr_t)sh & 15) || (sdown && !sh))
		return false;
	const int nw = SUM_NM * (f / (NG * GROUP_QB * 32));
	const size_t bytes = smem_words<1, NG>::of(nw) * 4;
	if (!smem_ready(tc_down_sum_kernel<CORE, NG>, bytes, set))
		return false;
	if (!run)
		return true;
	const x4k_moe_pick none = {};
	x4p::launch(tc_down_sum_kernel<CORE, NG>, dim3(d / ROWS), dim3(32 * nw), bytes, s, *r, pick ? *pick : none,
		    d, f, static_cast<const uint8_t *>(down), h, static_cast<const uint8_t *>(sdown), sh, y,
		    (bool)x4k_tc_copy_get());
	return true;
}

/* The library's core, one definition of the choice: tc8 with 256 values of
 * k a warp (the lab's best, bench/RESULTS.md 26), 512 where k needs more
 * than 20 warps of 256.  Templates, so that a file that includes this and
 * calls one instantiates only its kernels. */
template <class CORE = core8>
static bool lib_gemv(const void *w, int n, int k, const float *x, float *y, cudaStream_t s)
{
	return gemv<CORE, 1>(w, n, k, x, y, s) || gemv<CORE, 2>(w, n, k, x, y, s);
}

template <class CORE = core8>
static bool lib_gemv_swiglu(const void *wg, const void *wu, int n, int k, const float *x, float *h,
				   cudaStream_t s)
{
	return gemv_swiglu<CORE, 1>(wg, wu, n, k, x, h, s) || gemv_swiglu<CORE, 2>(wg, wu, n, k, x, h, s);
}

/* One token's MoE, both launches or neither (h: the gate/up rows the down
 * reads, x4k_moe_experts' workspace; sgate NULL: sh holds the shared
 * expert's product already, else the first launch forms it). */
template <class CORE = core8>
static bool lib_moe_sum(const x4k_moe_routes *r, const x4k_moe_pick *pick, const float *x, int d, int f,
			const void *gate, const void *up, const void *down, float *h, const void *sgate,
			const void *sup, const void *sdown, float *sh, float *y, cudaStream_t s)
{
	if (!moe_gu<CORE, 1>(r, pick, x, d, f, gate, up, h, sgate, sup, sh, s, false) ||
	    !moe_down_sum<CORE, 1>(r, pick, d, f, down, h, sdown, sh, y, s, false))
		return false;
	moe_gu<CORE, 1>(r, pick, x, d, f, gate, up, h, sgate, sup, sh, s);
	moe_down_sum<CORE, 1>(r, pick, d, f, down, h, sdown, sh, y, s);
	return true;
}

} /* namespace tcv */

#endif
