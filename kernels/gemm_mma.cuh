/*
 * gemm_mma.cuh - the prefill's tensor-core gemm core (sm_80 and later): a
 * tile of 128 weight rows x 64 tokens, Y = X W^T with fp32-accurate
 * products on mma.sync m16n8k16 (BF16 operands, fp32 accumulators), used
 * by x4k_gemm (gemm_quant.cu: IQ4_NL and BF16) and by the routed experts'
 * prefill tiles (moe_experts.cu: IQ4_NL and Q8_0).  The FMA core of
 * quant_dev.cuh stays for sm_75, Q6_K and the shapes this one does not
 * take (mma_shape).  The arithmetic and its error are docs/numerics.md 1.10.
 *
 * Operands.  The weights are exact BF16 operands: an IQ4_NL or Q8_0 code is
 * a small integer (|v| <= 128: eight significant bits, BF16's), a BF16
 * weight is itself.  The per-block fp16 scale d is never folded into them:
 * a block of 32 values is two k-steps whose six MMAs (below) run from zero
 * into a temporary, and acc = fma(d, tmp, acc) in fp32, which is also the
 * FMA core's order (a block's sum on the codes, then scaled once).  Each
 * fp32 activation x is split into three BF16 terms by truncation, x = hi +
 * mid + lo exactly (hi: x's top 8 significant bits; mid: the top 8 of the
 * remainder, which has at most 16; lo: the rest, at most 8), so X's
 * product is sum(W.hi) + sum(W.mid) + sum(W.lo) with every product exact,
 * and the only rounding is the accumulation's: inside a block the tensor
 * cores' (a chain of 6 MMAs from zero, lo first), across blocks fp32 fmas
 * (for BF16 weights fp32 adds), never the tensor cores along a whole row.
 *
 * Fragments.  The MMA's own k order (mma_dev.cuh): lane c = l & 3 takes
 * columns 2c, 2c + 1, 2c + 8, 2c + 9 of a k-step.  Its A fragments of both
 * k-steps of a block for one row are then two pairs of IQ4_NL code bytes
 * (bytes 2c, 2c+1 and 2c+8, 2c+9: their low nibbles are step 0's columns,
 * their high nibbles step 1's, 16 further), four pairs of Q8_0 bytes, or,
 * for BF16, ldmatrix.x4 of the raw rows.  Its B fragments of both k-steps
 * for one token and term are one 16-byte word of a plane (split_stage).
 *
 * The pipeline.  A stage is one block of 32 values: the raw weight bytes
 * (each row's block as the 16-byte lines covering it: 2 for IQ4_NL's 18
 * bytes at any even offset, 3 for Q8_0's 34, 4 for BF16's 64) and the 64
 * tokens' fp32 values, copied by cp.async into a ring of STAGES slots,
 * issued STAGES - 1 blocks ahead.  Each block is split once, by the whole
 * thread block, into three BF16 planes (double-buffered) one block before
 * its products, so every iteration is: wait for block b+1's copies; one
 * barrier; issue block b+3's copies; split block b+1; the MMAs of block b,
 * decoding the weights from the raw bytes straight into A fragments.  One
 * barrier a block, the copies two blocks ahead, the split and the decoding
 * on the integer and fp32 pipes beside the MMAs.
 *
 * Warps: 8, as 4 (rows) x 2 (tokens); a warp owns 32 rows (two m-tiles) x
 * 32 tokens (four n-tiles): 48 MMAs a block.  With two matrices (the
 * experts' gate and up, NM 2) m-tile 0 of warp w is gate rows 16w.., m-tile
 * 1 the same rows of up, so the lane that holds g holds u: the tile is 64
 * output rows of each, and silu(g) * u needs no exchange.
 *
 * Shared memory (dynamic, mma_fmt::SMEM): STAGES x (128 rows x SLOT bytes +
 * 64 tokens x 128 bytes), two sets of three planes of 64 tokens x 64 bytes,
 * and the 64 token pointers.  Bank-conflict-free layouts: a token's 32-byte
 * groups in the ring are rotated by the token's low two bits (the split's
 * 8-byte loads of four tokens at once), a plane's row holds what a lane
 * takes of both k-steps as one 16-byte word, and a BF16 row's 16-byte lines
 * are xor-ed with bits 1..2 of the row (ldmatrix's eight row addresses).
 *
 * Deterministic: every output element has one writer and its sums run in
 * an order fixed by k alone, the same in whichever tile a token or route
 * lands.
 */
#ifndef X4_GEMM_MMA_CUH
#define X4_GEMM_MMA_CUH

#include <atomic>

#include "quant_dev.cuh"
#include "mma_dev.cuh"

namespace x4m {

constexpr int ROWS = 128, TOKS = 64, KB = 32, STAGES = 4, THREADS = 256;
constexpr int PLANE = TOKS * KB * 2;  /* bytes of one BF16 term of a block's activations */
constexpr int XSTAGE = TOKS * KB * 4; /* bytes of a block's fp32 activations */
static_assert(TOKS == x4d::TT, "the experts' prefill tiles of 64 routes");

/* A weight type's geometry in the core: BB bytes a block of 32 values,
 * LINES 16-byte lines that cover one at any even offset (rows are 2-byte
 * aligned; BF16 rows are 16-byte aligned), SMEM the dynamic shared memory. */
template <int TYPE> struct mma_fmt {
	enum {
		BB = TYPE == X4_T_BF16 ? 64 : x4d::fmt<TYPE>::BB,
		LINES = TYPE == X4_T_IQ4_NL ? 2 : TYPE == X4_T_Q8_0 ? 3 : 4,
		SLOT = 16 * LINES,
		WSTAGE = ROWS * SLOT,
		STAGE = WSTAGE + XSTAGE,
		SMEM = STAGES * STAGE + 2 * 3 * PLANE + TOKS * 8,
		WCOPY = ROWS * LINES, /* 16-byte copies of a stage's weights */
	};
	static_assert(TYPE == X4_T_IQ4_NL || TYPE == X4_T_Q8_0 || TYPE == X4_T_BF16, "a core type");
	static_assert(TYPE == X4_T_BF16 || 14 + BB <= SLOT, "a block at offset 14 within its lines");
};

/* The tile's weight rows: NM matrices of n rows (w[m]: row 0, end[m]: one
 * past the matrix's last byte, which no copy reads beyond), rb bytes a row,
 * the tile's first row n0.  Rows past n repeat row n - 1 (their outputs
 * are not written). */
struct mma_rows {
	const uint8_t *w[2];
	const uint8_t *end[2];
	int n, n0;
	size_t rb;
	/* by selects, not an index: a run-time index puts the struct in local memory */
	__host__ __device__ const uint8_t *w_of(int m) const { return m ? w[1] : w[0]; }
	__host__ __device__ const uint8_t *end_of(int m) const { return m ? end[1] : end[0]; }
};

/* The tile row (0..127) that lane (g) of warp-row wm holds in m-tile mt,
 * half h (row g or g + 8 of the m-tile), and the (matrix, matrix row) a
 * tile row stands for. */
template <int NM>
__host__ __device__ constexpr int tile_row(int wm, int mt, int g, int h)
{
	return NM == 1 ? 32 * wm + 16 * mt + g + 8 * h : 64 * mt + 16 * wm + g + 8 * h;
}
template <int NM> __host__ __device__ constexpr int row_matrix(int i) { return NM == 1 ? 0 : i >> 6; }
template <int NM> __host__ __device__ constexpr int row_index(int i) { return NM == 1 ? i : i & 63; }

/* The BF16 bits of an integer with |v| < 256, exactly (8 significant bits). */
__host__ __device__ constexpr uint32_t bf16_int(int v)
{
	if (v == 0)
		return 0;
	const uint32_t s = v < 0 ? 0x8000u : 0u;
	const int a = v < 0 ? -v : v;
	int e = 0;
	while (a >> (e + 1))
		e++;
	return s | (uint32_t)(127 + e) << 7 | ((uint32_t)(a << (7 - e)) & 0x7fu);
}

/* Byte `hi` (0 the low, 1 the high) of the BF16 of IQ4_NL codebook entries
 * 4q .. 4q + 3 (lib/blockfmt.h's codebook), as the four bytes of a word. */
__host__ __device__ constexpr uint32_t iq4_bf16_word(int q, int hi)
{
	uint32_t w = 0;
	for (int i = 0; i < 4; i++) {
		const int code = 4 * q + i;
		const uint64_t t = code < 8 ? (uint64_t)X4B_IQ4NL_LO : (uint64_t)X4B_IQ4NL_HI;
		const int v = (int8_t)(uint8_t)(t >> (8 * (code & 7)));
		w |= ((bf16_int(v) >> (8 * hi)) & 0xffu) << (8 * i);
	}
	return w;
}

/* Host: the current device takes KERNEL's SMEM bytes of dynamic shared
 * memory, the attribute set (once a device and kernel).  False (and the
 * runtime's error cleared) where it cannot: the caller runs the FMA core. */
template <auto KERNEL>
static bool kernel_ready(int smem)
{
	static std::atomic<unsigned long long> ready{ 0 };
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
		(void)cudaGetLastError();
		return false;
	}
	const unsigned long long bit = 1ull << dev;
	if (ready.load() & bit)
		return true;
	int optin = 0;
	if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
	    optin < smem ||
	    cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
		(void)cudaGetLastError();
		return false;
	}
	ready.fetch_or(bit);
	return true;
}

/* Host: the shapes the core takes: k a multiple of 32 (whole blocks; BF16
 * rows then 16-byte lines), the weights and activations 16-byte aligned. */
static inline bool mma_shape(int k, const void *w, const void *x)
{
	return k > 0 && k % KB == 0 && !((uintptr_t)w & 15) && !((uintptr_t)x & 15);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

/* ---- the activations' split ---- */

/* The upper halves of a and b (a's in the low half): BF16 truncations. */
__device__ __forceinline__ uint32_t hi16x2(float a, float b)
{
	return __byte_perm(__float_as_uint(a), __float_as_uint(b), 0x7632);
}

/* a less its truncation to BF16: exact (the low 16 bits of a's significand). */
__device__ __forceinline__ float rem16(float a)
{
	return __fsub_rn(a, __uint_as_float(__float_as_uint(a) & 0xffff0000u));
}

/* Four values as three BF16 terms (t[0] hi, t[1] mid, t[2] lo), two a word:
 * v = hi + mid + lo exactly.  Of a remainder's at most 16 significant bits
 * mid keeps the top 8 and lo the rest, at most 8, which BF16 holds. */
__device__ __forceinline__ void split3(float4 v, uint2 (&t)[3])
{
	t[0] = make_uint2(hi16x2(v.x, v.y), hi16x2(v.z, v.w));
	v = make_float4(rem16(v.x), rem16(v.y), rem16(v.z), rem16(v.w));
	t[1] = make_uint2(hi16x2(v.x, v.y), hi16x2(v.z, v.w));
	v = make_float4(rem16(v.x), rem16(v.y), rem16(v.z), rem16(v.w));
	t[2] = make_uint2(hi16x2(v.x, v.y), hi16x2(v.z, v.w));
}

/* ---- the weights' decoding into A fragments ---- */

/* The BF16 of the IQ4_NL codebook as byte tables (high bytes, low bytes;
 * codes 0..3, 4..7, 8..11, 12..15 a word), held in registers: or-ed with a
 * zero the compiler cannot see through (as quant_dev.cuh's iq4_consts), since
 * a byte-permute of two constants costs a move of one of them at every use. */
struct iq4_tab {
	uint32_t h[4], l[4];
};

__device__ __forceinline__ iq4_tab iq4_tab_make(uint32_t zero)
{
	return { { iq4_bf16_word(0, 1) | zero, iq4_bf16_word(1, 1) | zero, iq4_bf16_word(2, 1) | zero,
		   iq4_bf16_word(3, 1) | zero },
		 { iq4_bf16_word(0, 0) | zero, iq4_bf16_word(1, 0) | zero, iq4_bf16_word(2, 0) | zero,
		   iq4_bf16_word(3, 0) | zero } };
}

/* The four codes of two IQ4_NL code bytes (q: the bytes in its low half;
 * in selector order, byte 0's low and high nibble, byte 1's) as BF16:
 * p02 = values of byte 0 low, byte 1 low; p13 = byte 0 high, byte 1 high.
 * Each table byte by three byte-permutes (codes 0..7, 8..11 and the pick
 * by the code's bit 3), as iq4_lookup4. */
__device__ __forceinline__ void iq4_bf16x4(uint32_t q, const iq4_tab &t, uint32_t &p02, uint32_t &p13)
{
	const uint32_t sel = 0x3210u | ((q >> 1) & 0x4444u);
	const uint32_t hb = __byte_perm(__byte_perm(t.h[0], t.h[1], q), __byte_perm(t.h[2], t.h[3], q), sel);
	const uint32_t lb = __byte_perm(__byte_perm(t.l[0], t.l[1], q), __byte_perm(t.l[2], t.l[3], q), sel);
	p02 = __byte_perm(lb, hb, 0x6240u);
	p13 = __byte_perm(lb, hb, 0x7351u);
}

/* Two Q8_0 code bytes of w (selected by sel: 0x4140 bytes 0 and 1) as
 * BF16, exactly: with s a code, 0x4300 | (s & 127) is 128 + (s & 127) and
 * the sign bit picks -128 or -256 to add. */
__device__ __forceinline__ uint32_t q8_bf16x2(uint32_t w, uint32_t sel)
{
	const uint32_t p = __byte_perm(w, 0u, sel);
	const uint32_t m = (p & 0x007f007fu) | 0x43004300u;
	const uint32_t s = (p & 0x00800080u) | 0xc300c300u;
	return fma_bf16x2(m, 0x3f803f80u /* 1, 1 */, s);
}

__device__ __forceinline__ uint32_t lds16(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }

/* A fragments of both k-steps of one block for one row (half h of the
 * m-tile: a[s][h] columns 2c, 2c + 1 of step s, a[s][2 + h] 2c + 8, 2c + 9)
 * and its scale, from the block's raw bytes at p (2-aligned). */
template <int TYPE>
__device__ __forceinline__ void decode_row(const uint8_t *p, int c, int h, const iq4_tab &t,
					   uint32_t (&a)[2][4], float &d)
{
	d = x4c::f16((uint16_t)lds16(p));
	if constexpr (TYPE == X4_T_IQ4_NL) {
		iq4_bf16x4(lds16(p + 2 + 2 * c), t, a[0][h], a[1][h]);
		iq4_bf16x4(lds16(p + 10 + 2 * c), t, a[0][2 + h], a[1][2 + h]);
	} else {
		a[0][h] = q8_bf16x2(lds16(p + 2 + 2 * c), 0x4140u);
		a[0][2 + h] = q8_bf16x2(lds16(p + 10 + 2 * c), 0x4140u);
		a[1][h] = q8_bf16x2(lds16(p + 18 + 2 * c), 0x4140u);
		a[1][2 + h] = q8_bf16x2(lds16(p + 26 + 2 * c), 0x4140u);
	}
}

/* ---- one tile ---- */

/* What a thread copies each stage: weight copy u (0, 1) is copy q = tid +
 * 256 u of the stage's WCOPY (row q / LINES, line q % LINES of the lines that
 * cover its block), activation copy u line q % 8 of token q / 8. */
template <int TYPE> __device__ __forceinline__ bool wcopy(int u)
{
	return (int)threadIdx.x + THREADS * u < mma_fmt<TYPE>::WCOPY;
}

/* The start of weight copy u's row (rows past n repeat row n - 1). */
template <int TYPE, int NM>
__device__ __forceinline__ const uint8_t *wcopy_row(const mma_rows &R, int u)
{
	const int i = ((int)threadIdx.x + THREADS * u) / mma_fmt<TYPE>::LINES;
	return R.w_of(row_matrix<NM>(i)) + (size_t)min(R.n0 + row_index<NM>(i), R.n - 1) * R.rb;
}

/* Issue block b's copies into stage (a ring slot's shared address); wrow:
 * the rows of the thread's weight copies, xrow the token rows. */
template <int TYPE, int NM>
__device__ __forceinline__ void issue(uint32_t stage, const mma_rows &R, const uint8_t *const (&wrow)[2],
				      const float *const *xrow, int b)
{
	using F = mma_fmt<TYPE>;
#pragma unroll
	for (int u = 0; u < 2; u++) {
		if (!wcopy<TYPE>(u))
			continue;
		const int q = (int)threadIdx.x + THREADS * u, i = q / F::LINES, j = q % F::LINES;
		/* line j of the aligned lines that cover the block; the bytes left
		 * in the matrix from it (only the last row's last lines see its end) */
		const uint8_t *line = reinterpret_cast<const uint8_t *>(
			((uintptr_t)wrow[u] + (size_t)b * F::BB) & ~(uintptr_t)15) + 16 * j;
		const long long left = R.end_of(row_matrix<NM>(i)) - line;
		const int jj = TYPE == X4_T_BF16 ? j ^ ((i >> 1) & 3) : j; /* ldmatrix's banks */
		if (left > 0) /* a line wholly past the matrix lies outside the block: not copied */
			cp_async16(stage + i * F::SLOT + 16 * jj, line, left < 16 ? (int)left : 16);
	}
#pragma unroll
	for (int u = 0; u < 2; u++) {
		const int q = (int)threadIdx.x + THREADS * u, tk = q >> 3, xl = q & 7;
		cp_async16(stage + F::WSTAGE + tk * 128 + 16 * (xl ^ ((tk & 3) << 1)),
			   xrow[tk] + (size_t)b * KB + 4 * xl, 16);
	}
}

/* Split block stage's activations into the planes at pl.  This thread:
 * token tid / 4, the values lane c = tid % 4 takes, 8q + 2c + {0,1} for q
 * = 0..3 (in the ring token tk's 32-byte group q is at q ^ (tk & 3)).  A
 * plane's token row is 64 bytes, value 16s + 8e + 2c + {0,1} (k-step s)
 * at byte 16c + 8s + 4e: lane c's B registers of both k-steps are one
 * 16-byte word at 16c, {step 0 b0, b1, step 1 b0, b1}. */
template <int TYPE>
__device__ __forceinline__ void split_stage(const uint8_t *stage, uint8_t *pl)
{
	const int tk = threadIdx.x >> 2, c = threadIdx.x & 3;
	const uint8_t *xs = stage + mma_fmt<TYPE>::WSTAGE + tk * 128 + 8 * c;
	float2 v[4];
#pragma unroll
	for (int q = 0; q < 4; q++)
		v[q] = *reinterpret_cast<const float2 *>(xs + 32 * (q ^ (tk & 3)));
	uint2 t0[3], t1[3]; /* k-steps 0 (q 0, 1) and 1 (q 2, 3) */
	split3(make_float4(v[0].x, v[0].y, v[1].x, v[1].y), t0);
	split3(make_float4(v[2].x, v[2].y, v[3].x, v[3].y), t1);
	uint8_t *o = pl + tk * 64 + 16 * c;
#pragma unroll
	for (int j = 0; j < 3; j++)
		*reinterpret_cast<uint4 *>(o + j * PLANE) = make_uint4(t0[j].x, t0[j].y, t1[j].x, t1[j].y);
}

/* The MMAs of one block: A decoded from stage's raw rows, B from the planes
 * pl; acc (fp32) += d * (the block's products).  rs16: the lane's rows'
 * start addresses mod 16, 4 bits each (m-tile mt, half h at 8 mt + 4 h),
 * b the block. */
template <int TYPE, int NM>
__device__ __forceinline__ void block_mma(const uint8_t *stage, const uint8_t *pl, uint32_t rs16, int b,
					  const iq4_tab &t, float (&acc)[2][4][4])
{
	using F = mma_fmt<TYPE>;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int wm = warp & 3, wn = warp >> 2, g = lane >> 2, c = lane & 3;
	uint32_t a[2][2][4]; /* [m-tile][k-step][reg] */
	float d[2][2];
	if constexpr (TYPE == X4_T_BF16) {
		/* ldmatrix.x4 of m-tile mt, k-step s: matrix i rows 8 (i & 1).., columns
		 * 16s + 8 (i >> 1).., lane l addressing row l & 7 of matrix l >> 3 */
#pragma unroll
		for (int mt = 0; mt < 2; mt++) {
			const int i = tile_row<NM>(wm, mt, lane & 7, (lane >> 3) & 1);
#pragma unroll
			for (int s = 0; s < 2; s++)
				ldsm_x4(a[mt][s], smem_u32(stage + i * F::SLOT +
							   16 * ((2 * s + (lane >> 4)) ^ ((i >> 1) & 3))));
			d[mt][0] = d[mt][1] = 1.f;
		}
	} else {
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int i = tile_row<NM>(wm, mt, g, h);
				const int mis = ((rs16 >> (8 * mt + 4 * h)) + b * F::BB) & 15;
				decode_row<TYPE>(stage + i * F::SLOT + mis, c, h, t, a[mt], d[mt][h]);
			}
	}
	float tmp[2][4][4];
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int nt = 0; nt < 4; nt++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				tmp[mt][nt][r] = 0.f;
	/* the n-tiles in two pairs: a pair's B of both k-steps (24 registers),
	 * four independent accumulator chains */
#pragma unroll
	for (int np = 0; np < 2; np++) {
		uint4 bf[2][3]; /* [n-tile of the pair][term]: {step 0 b0, b1, step 1 b0, b1} */
#pragma unroll
		for (int u = 0; u < 2; u++) {
			const uint8_t *q = pl + (32 * wn + 8 * (2 * np + u) + g) * 64 + 16 * c;
#pragma unroll
			for (int j = 0; j < 3; j++)
				bf[u][j] = *reinterpret_cast<const uint4 *>(q + j * PLANE);
		}
#pragma unroll
		for (int s = 0; s < 2; s++)
#pragma unroll
			for (int j = 2; j >= 0; j--) /* lo, mid, hi: the small terms first */
#pragma unroll
				for (int mt = 0; mt < 2; mt++)
#pragma unroll
					for (int u = 0; u < 2; u++)
						mma_bf16(tmp[mt][2 * np + u], a[mt][s], s ? bf[u][j].z : bf[u][j].x,
							 s ? bf[u][j].w : bf[u][j].y);
	}
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int nt = 0; nt < 4; nt++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				acc[mt][nt][r] = TYPE == X4_T_BF16
					? __fadd_rn(acc[mt][nt][r], tmp[mt][nt][r])
					: __fmaf_rn(d[mt][r >> 1], tmp[mt][nt][r], acc[mt][nt][r]);
}

/* One tile: the rows of R against the 64 tokens xrow[0..63] (shared memory,
 * written by the caller before the call; pointers past the valid tokens
 * repeat a valid one), k values (k % 32 == 0).  All THREADS threads call.
 * On return acc[mt][nt][r] of lane (g, c) of warp (wm, wn) is tile row
 * tile_row<NM>(wm, mt, g, r >> 1), token 32 wn + 8 nt + 2c + (r & 1). */
template <int TYPE, int NM>
__device__ __forceinline__ void mma_tile(uint8_t *smem, const mma_rows &R, const float *const *xrow,
					 int k, float (&acc)[2][4][4])
{
	using F = mma_fmt<TYPE>;
	uint8_t *planes = smem + STAGES * F::STAGE;
	const uint32_t ring = smem_u32(smem);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int wm = warp & 3, g = lane >> 2;
	const int nb = k / KB;
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int nt = 0; nt < 4; nt++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				acc[mt][nt][r] = 0.f;
	uint32_t rs16 = 0;
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int i = tile_row<NM>(wm, mt, g, h);
			const int r = min(R.n0 + row_index<NM>(i), R.n - 1);
			rs16 |= (uint32_t)((uintptr_t)(R.w_of(row_matrix<NM>(i)) + (size_t)r * R.rb) & 15)
				<< (8 * mt + 4 * h);
		}
	const uint8_t *wrow[2];
#pragma unroll
	for (int u = 0; u < 2; u++)
		wrow[u] = wcopy<TYPE>(u) ? wcopy_row<TYPE, NM>(R, u) : nullptr;
	__syncthreads(); /* xrow written */
	/* a zero the compiler cannot fold, in each thread's registers: the
	 * kernels of this core run on grids of one z-layer */
	const iq4_tab t = iq4_tab_make(threadIdx.x & (gridDim.z - 1));
#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < nb)
			issue<TYPE, NM>(ring + s * F::STAGE, R, wrow, xrow, s);
		cp_async_commit();
	}
	cp_async_wait<STAGES - 2>(); /* block 0 */
	__syncthreads();
	split_stage<TYPE>(smem, planes);
	for (int b = 0; b < nb; b++) {
		cp_async_wait<STAGES - 3>(); /* block b + 1 (this thread's copies) */
		__syncthreads();             /* everyone's; the split of b; the MMAs of b - 1 done */
		if (b + STAGES - 1 < nb)
			issue<TYPE, NM>(ring + ((b + STAGES - 1) % STAGES) * F::STAGE, R, wrow, xrow, b + STAGES - 1);
		cp_async_commit();
		if (b + 1 < nb)
			split_stage<TYPE>(smem + ((b + 1) % STAGES) * F::STAGE, planes + ((b + 1) & 1) * 3 * PLANE);
		block_mma<TYPE, NM>(smem + (b % STAGES) * F::STAGE, planes + (b & 1) * 3 * PLANE, rs16, b, t, acc);
	}
}

/* A one-matrix tile's outputs after mma_tile, as put(row, t, v): row the
 * matrix row n0 + the tile row this lane holds, t the token within the
 * tile (0..63), every value of the lane's acc once.  The caller's put
 * checks the row and token bounds and writes. */
template <typename PUT>
__device__ __forceinline__ void tile_store(const float (&acc)[2][4][4], int n0, PUT &&put)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int wm = warp & 3, wn = warp >> 2, g = lane >> 2, c = lane & 3;
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				put(n0 + tile_row<1>(wm, mt, g, r >> 1), 32 * wn + 8 * j + 2 * c + (r & 1),
				    acc[mt][j][r]);
}

#endif /* sm_80 */

} /* namespace x4m */

#endif
