/*
 * gemv_quant.cu - decode matrix-vector products y = W x for IQ4_NL, Q6_K and
 * BF16 weights (x4_kern.h section 1).
 *
 * BF16 with k % 8 == 0 and 16-byte aligned w and x (every matrix of the
 * model) takes gemv_bf16_kernel: weights straight into registers with
 * 16-byte streaming loads, a lane 8 columns of a 256-column unit, the
 * reduction split across the warps of a block (split-K inside the block,
 * summed in warp order through shared memory: no atomics, the same bits
 * every run) so that thin matrices (576 or 768 rows of 3584) still put
 * 288-384 blocks and every byte of the matrix in flight at once.  At 317feb9
 * the BF16 products ran near 1 TB/s, a warp a row, one row's chunks one
 * dependent round at a time.
 *
 * IQ4_NL takes the tensor cores (gemv_tc.cuh's tc8 core: the codes as int8
 * operands, x as four 8-bit limbs) on sm_80 and later where the shape
 * allows (rows in sixteens, k in whole 256- or 512-value ranges over at
 * most 20 warps, 16-byte aligned) and the products' switch is on
 * (x4k_gemm_mma_set); otherwise gemv_kernel (below), and the fused
 * gate/up/SwiGLU product of one token the register core of quant_dev.cuh:
 * a lane an 8-block group of a row, loaded in one round into registers and
 * decoded without int-to-float conversions, a row's groups added in order
 * through shared memory.
 *
 * Q6_K with k <= 4096 and rows of an even number of 210-byte blocks (4-byte
 * aligned; the head's 3584 is 14) takes gemv_q6k_rows_kernel: 4 rows a warp
 * (2 where the card's shared memory does not take 4's block; 1 in
 * gemv_q6k_kernel, a warp a row, where it takes neither), copied whole into
 * shared memory in one round, x loaded once a block and each read of it
 * serving the warp's rows; the same sums as gemv_kernel.  4 rows a warp
 * made the decode step 1.018x faster at 512 tokens of context than 1 and
 * 1.005x than 2 (bench/RESULTS.md 37).
 *
 * Everything else takes gemv_kernel: a warp per row, eight rows a block;
 * the row's bytes are staged through shared memory with 16-byte loads and
 * the x vector is held there in 1024-value chunks (quant_dev.cuh).
 */
#include <atomic>

#include "cuda_check.h"
#include "x4_kern.h"
#include "quant_dev.cuh"
#include "pdl.cuh"
#include "gemv_tc.cuh"
#include "gemv_q6k_tc.cuh"
#include "mma_dev.cuh"

using namespace x4d;

/* Two BF16 values packed in one 32-bit word (the lower address in the low half). */
__device__ __forceinline__ float2 bf16x2w(uint32_t w)
{
	return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

template <int TYPE>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_kernel(const uint8_t *__restrict__ w, int n, int k, const float *__restrict__ x,
	    float *__restrict__ y)
{
	__shared__ __align__(16) uint8_t smem[gemv_smem<TYPE, 1, 1>::BYTES];
	__shared__ const float *xsrc[1];
	const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	const bool ok = row < n;
	if (threadIdx.x == 0)
		xsrc[0] = x; /* read after gemv_block's first barrier */
	const uint8_t *const wr[1] = { w + (size_t)(ok ? row : 0) * row_bytes(TYPE, k) };
	float acc[1][1];
	gemv_block<TYPE, 1, 1>(smem, wr, ok ? row : -1, k, xsrc, acc);
	if (ok && (threadIdx.x & 31) == 0)
		y[row] = acc[0][0];
}

/* ---- BF16, split-K inside the block ----
 * Block: 8 warps = G row groups x WK warps (WK = 1 << wkl); row group g
 * holds rows (blockIdx.x * G + g) * R .. + R - 1, and its warp kw sums
 * units [kw U / WK, (kw + 1) U / WK) of the U = ceil(k / 256) units, NB
 * units' loads (R rows each) in flight at a time.  Per row, a lane sums its
 * columns in unit order, the warp in one shuffle tree, the WK warps in kw
 * order. */
constexpr int BF_UNIT = 256; /* columns a warp load: 32 lanes x 8 */

__device__ __forceinline__ float dot8_bf16(uint4 w, float4 xa, float4 xb, float acc)
{
	const float2 a = bf16x2w(w.x), b = bf16x2w(w.y), c = bf16x2w(w.z), d = bf16x2w(w.w);
	acc = __fmaf_rn(a.x, xa.x, acc);
	acc = __fmaf_rn(a.y, xa.y, acc);
	acc = __fmaf_rn(b.x, xa.z, acc);
	acc = __fmaf_rn(b.y, xa.w, acc);
	acc = __fmaf_rn(c.x, xb.x, acc);
	acc = __fmaf_rn(c.y, xb.y, acc);
	acc = __fmaf_rn(d.x, xb.z, acc);
	return __fmaf_rn(d.y, xb.w, acc);
}

/* A finite float made from a loaded word (its sign and exponent cleared). */
__device__ __forceinline__ float finite_of(uint32_t u) { return __uint_as_float(u & 0x007fffffu); }

/* Makes every product of a batch wait for every load of it.  Left alone,
 * the compiler puts each product right after its own load, so a lane's
 * loads go one dependent round at a time; here z = +0 is formed from one
 * word of every load and added to x, which changes no value (x + 0 = x,
 * up to the sign of a zero) but gives each product all the loads as
 * inputs, so they are all issued first. */
template <int NB, int R>
__device__ __forceinline__ void load_fence(const uint4 (&wq)[NB][R], float4 (&xa)[NB], float4 (&xb)[NB])
{
	float z = 0.f;
#pragma unroll
	for (int b = 0; b < NB; b++) {
		z = __fmaf_rn(finite_of(__float_as_uint(xa[b].x)), 0.f, z);
		z = __fmaf_rn(finite_of(__float_as_uint(xb[b].x)), 0.f, z);
#pragma unroll
		for (int r = 0; r < R; r++)
			z = __fmaf_rn(finite_of(wq[b][r].w), 0.f, z);
	}
#pragma unroll
	for (int b = 0; b < NB; b++) {
		xa[b].x = __fadd_rn(xa[b].x, z), xa[b].y = __fadd_rn(xa[b].y, z);
		xa[b].z = __fadd_rn(xa[b].z, z), xa[b].w = __fadd_rn(xa[b].w, z);
		xb[b].x = __fadd_rn(xb[b].x, z), xb[b].y = __fadd_rn(xb[b].y, z);
		xb[b].z = __fadd_rn(xb[b].z, z), xb[b].w = __fadd_rn(xb[b].w, z);
	}
}

/* The weights of units u0 .. u0 + NB - 1 for R rows: unpredicated loads
 * from clamped addresses (c8 0 where !ok; the caller zeroes those), since
 * the predicated form compiled to a branch and a constant load per row
 * around every weight load. */
template <int NB, int R>
__device__ __forceinline__ void bf16_load_w(const uint4 *const (&wr)[R], int u0, int ue, int k8,
					    int lane, uint4 (&wq)[NB][R], bool (&ok)[NB], int (&c8)[NB])
{
#pragma unroll
	for (int b = 0; b < NB; b++) {
		c8[b] = (u0 + b) * (BF_UNIT / 8) + lane; /* this lane's 8 columns */
		ok[b] = u0 + b < ue && c8[b] < k8;
		c8[b] = ok[b] ? c8[b] : 0;
	}
#pragma unroll
	for (int b = 0; b < NB; b++)
#pragma unroll
		for (int r = 0; r < R; r++)
			wq[b][r] = __ldcs(wr[r] + c8[b]);
}

/* Rows [0, n1) are w's (into y), rows [n1, n) w2's (into y2): two
 * products that share x in one launch (x4k_gemv2); w2 NULL: one. */
template <int R, int NB>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_bf16_kernel(const uint4 *__restrict__ w, int n, int k, int wkl, const float4 *__restrict__ x,
		 float *__restrict__ y, const uint4 *__restrict__ w2, int n1, float *__restrict__ y2)
{
	__shared__ float red[GEMV_WARPS * R]; /* [warp][row of the group] */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int WK = 1 << wkl, G = GEMV_WARPS >> wkl;
	const int g = warp >> wkl, kw = warp & (WK - 1);
	const int U = (k + BF_UNIT - 1) / BF_UNIT;
	const int ub = kw * U / WK, ue = (kw + 1) * U / WK;
	const int row0 = (blockIdx.x * G + g) * R;
	const size_t k8 = (size_t)k / 8; /* uint4 a row */
	float acc[R];
#pragma unroll
	for (int r = 0; r < R; r++)
		acc[r] = 0.f;
	const uint4 *wr[R]; /* the group's rows, clamped into the matrix (never written) */
#pragma unroll
	for (int r = 0; r < R; r++) {
		const int row = min(row0 + r, n - 1);
		wr[r] = row < n1 ? w + (size_t)row * k8 : w2 + (size_t)(row - n1) * k8;
	}
	/* The weights of the first batch before the wait: they do not depend
	 * on the previous kernel (pdl.cuh); each later batch's weights are
	 * loaded at the end of the one before. */
	uint4 wq[NB][R];
	bool ok[NB];
	int c8[NB];
	int u0 = ub;
	bf16_load_w<NB, R>(wr, u0, ue, (int)k8, lane, wq, ok, c8);
	x4p::trigger();
	x4p::wait();
	while (u0 < ue) {
		float4 xa[NB], xb[NB];
#pragma unroll
		for (int b = 0; b < NB; b++) {
			xa[b] = __ldg(x + 2 * c8[b]);
			xb[b] = __ldg(x + 2 * c8[b] + 1);
		}
		load_fence<NB, R>(wq, xa, xb);
#pragma unroll
		for (int b = 0; b < NB; b++)
			if (!ok[b]) {
				xa[b] = xb[b] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
				for (int r = 0; r < R; r++)
					wq[b][r] = make_uint4(0u, 0u, 0u, 0u);
			}
#pragma unroll
		for (int b = 0; b < NB; b++)
#pragma unroll
			for (int r = 0; r < R; r++)
				acc[r] = dot8_bf16(wq[b][r], xa[b], xb[b], acc[r]);
		u0 += NB;
		if (u0 < ue)
			bf16_load_w<NB, R>(wr, u0, ue, (int)k8, lane, wq, ok, c8);
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
		const float a = x4c::warp_sum(acc[r]);
		if (lane == 0)
			red[warp * R + r] = a;
	}
	__syncthreads();
	if ((int)threadIdx.x < G * R) {
		const int g2 = threadIdx.x / R, r = threadIdx.x % R;
		const int row = (blockIdx.x * G + g2) * R + r;
		if (row < n) {
			float t = red[(g2 * WK) * R + r];
			for (int q = 1; q < WK; q++)
				t = __fadd_rn(t, red[(g2 * WK + q) * R + r]);
			if (row < n1)
				y[row] = t;
			else
				y2[row - n1] = t;
		}
	}
}

/* The BF16 path's shape: WK warps a row (more when the row has more units),
 * then as many rows a warp (R) as keep two blocks an SM of the H200's 132
 * (the card of docs: 264 blocks), at most 8 loads a lane in flight. */
static bool gemv_bf16_launch(const void *w, int n, int k, const float *x, float *y, cudaStream_t s,
			     const void *w2 = nullptr, int n2 = 0, float *y2 = nullptr)
{
	if (k % 8 || ((uintptr_t)w & 15) || ((uintptr_t)x & 15) || ((uintptr_t)w2 & 15))
		return false;
	const int n1 = n;
	n += n2;
	const int U = (k + BF_UNIT - 1) / BF_UNIT;
	const int wkl = U >= 8 ? 3 : U >= 4 ? 2 : U >= 2 ? 1 : 0;
	const int G = GEMV_WARPS >> wkl, upw = (U + (1 << wkl) - 1) >> wkl;
	const int R = n / (4 * G) >= 264 && upw <= 2 ? 4 : n / (2 * G) >= 264 ? 2 : 1;
	const unsigned blocks = (unsigned)((n + G * R - 1) / (G * R));
	const uint4 *w4 = static_cast<const uint4 *>(w), *w24 = static_cast<const uint4 *>(w2);
	const float4 *x4 = reinterpret_cast<const float4 *>(x);
	const dim3 g(blocks), b(GEMV_WARPS * 32);
	if (R == 4)
		x4p::launch(gemv_bf16_kernel<4, 2>, g, b, 0, s, w4, n, k, wkl, x4, y, w24, n1, y2);
	else if (R == 2)
		x4p::launch(gemv_bf16_kernel<2, 2>, g, b, 0, s, w4, n, k, wkl, x4, y, w24, n1, y2);
	else
		x4p::launch(gemv_bf16_kernel<1, 2>, g, b, 0, s, w4, n, k, wkl, x4, y, w24, n1, y2);
	return true;
}

/* ---- IQ4_NL, the register core (quant_dev.cuh) ----
 * Only the fused gate/up/SwiGLU product takes it: for a plain IQ4_NL gemv
 * the staged gemv_kernel measured faster at every decode shape on the H200
 * (bench/kernels/gemv.cu, 2026-12-01: shared-expert down 7.8 against 9.2
 * us, dense down 30.9 against 34.4, dense gate 28.6 against 38.0), so the
 * register core's plain gemv was dropped (bench/RESULTS.md 14). */
/* h = silu(W_gate x) * (W_up x) for one token: a lane an 8-block group of
 * a gate row and its up row, read together (they share x), the
 * SwiGLU product in fp32 as x4k_swiglu forms it.  A row's two sums run
 * exactly as gemv_iq4_kernel's. */
__global__ void __launch_bounds__(IQ_THREADS)
gemv_iq4_swiglu_kernel(const uint8_t *__restrict__ wg, const uint8_t *__restrict__ wu, int n,
		       int k, const float4 *__restrict__ x, float *__restrict__ h)
{
	__shared__ float part[2][IQ_THREADS]; /* [gate | up][row of the block][group] */
	const int NG = k / 256, S = IQ_THREADS / NG, t = threadIdx.x;
	const int s = t / NG, g = t % NG;
	const size_t rb = (size_t)(k / 32) * 18;
	if (s >= S) { /* an idle lane still waits: h is written after its barrier */
		x4p::trigger();
		x4p::wait();
	} else {
		const size_t at = (size_t)min((int)blockIdx.x * S + s, n - 1) * rb + 144 * (size_t)g;
		const uint4 *const wp[2] = { reinterpret_cast<const uint4 *>(wg + at),
					     reinterpret_cast<const uint4 *>(wu + at) };
		float acc[2] = { 0.f, 0.f };
		iq4_group_dot<2, true>(wp, x + 64 * g, acc); /* waits between its weight and x loads */
		part[0][s * NG + g] = acc[0];
		part[1][s * NG + g] = acc[1];
	}
	__syncthreads();
	if (t < S) {
		const int row = blockIdx.x * S + t;
		if (row < n) {
			float a = part[0][t * NG], b = part[1][t * NG];
			for (int q = 1; q < NG; q++) {
				a = __fadd_rn(a, part[0][t * NG + q]);
				b = __fadd_rn(b, part[1][t * NG + q]);
			}
			h[row] = silu(a) * b;
		}
	}
}

/* ---- Q6_K: a warp a row, the whole row staged in one round ----
 * gemv_kernel walks a Q6_K row in 1024-value chunks, each behind two block
 * barriers and an x chunk reload (x read from L2 four times a row) and a
 * stage whose ragged 16-byte edges (a 2940-byte row is only 4-byte
 * aligned) go byte by byte.  Here x is loaded once a block, padded as
 * gemv_block lays it chunk by chunk, and a warp stages its whole row (k <=
 * Q6_KMAX) with 16-byte loads and 4-byte edges, every load issued before
 * the first store; then chunk_dot runs chunk after chunk exactly as in
 * gemv_block, so a row's sum has the same bits as gemv_kernel's. */
constexpr int Q6_KMAX = 4096;
constexpr int Q6_ROWB = Q6_KMAX / 256 * 210;
constexpr int Q6_STAGE = (Q6_ROWB + 12 + 15) / 16 * 16; /* + the misalignment (4, 8 or 12) */

/* n bytes at src (4-byte aligned, n % 4 == 0, n >= 32) staged into a
 * 16-byte aligned buffer at the same offset modulo 16: whole 16-byte lines
 * with 16-byte loads, the words of a ragged first or last line with 4-byte
 * loads (lanes 0-3 and 4-7).  Split in a load half and a store half so
 * that a caller can issue every load of a block before its first store. */
template <int MAXN> struct stage4_regs {
	enum { IT = ((MAXN + 12 + 15) / 16 + 31) / 32 };
	uint4 v[IT];
	bool full[IT];
	uint32_t ew;
	int eb, mis;
	bool edge;
};

template <int MAXN>
__device__ __forceinline__ void stage4_load(stage4_regs<MAXN> &g, const uint8_t *src, int n, int lane)
{
	const int mis = (int)((uintptr_t)src & 15);
	const uint4 *s4 = reinterpret_cast<const uint4 *>(src - mis);
	const int lines = (mis + n + 15) >> 4;
	g.mis = mis;
#pragma unroll
	for (int i = 0; i < stage4_regs<MAXN>::IT; i++) {
		const int li = lane + 32 * i, lo = 16 * li;
		g.full[i] = li < lines && lo >= mis && lo + 16 <= mis + n;
		g.v[i] = __ldcs(s4 + (g.full[i] ? li : mis ? 1 : 0)); /* a whole line inside (n >= 32) */
	}
	const int eline = lane < 4 ? 0 : lines - 1;
	g.eb = 16 * eline + 4 * (lane & 3);
	const bool ragged = eline == 0 ? mis != 0 || n < 16 : ((mis + n) & 15) != 0;
	g.edge = lane < 8 && (lane < 4 || lines > 1) && ragged && g.eb >= mis && g.eb + 4 <= mis + n;
	g.ew = __ldcs(reinterpret_cast<const uint32_t *>(src - mis) + (g.edge ? g.eb / 4 : mis / 4));
}

/* A +0 made from a word of every load of g (or-ed into the stored words by
 * stage4_store: the stores then wait for every load). */
template <int MAXN>
__device__ __forceinline__ float stage4_zero(const stage4_regs<MAXN> &g, float z)
{
	z = __fmaf_rn(__uint_as_float(g.ew & 0x007fffffu), 0.f, z);
#pragma unroll
	for (int i = 0; i < stage4_regs<MAXN>::IT; i++)
		z = __fmaf_rn(__uint_as_float(g.v[i].x & 0x007fffffu), 0.f, z);
	return z;
}

/* Returns where src's first byte landed in buf; the caller __syncwarp()s. */
template <int MAXN>
__device__ __forceinline__ const uint8_t *stage4_store(const stage4_regs<MAXN> &g, uint8_t *buf,
							uint32_t zi, int lane)
{
#pragma unroll
	for (int i = 0; i < stage4_regs<MAXN>::IT; i++)
		if (g.full[i])
			reinterpret_cast<uint4 *>(buf)[lane + 32 * i] =
				make_uint4(g.v[i].x | zi, g.v[i].y | zi, g.v[i].z | zi, g.v[i].w | zi);
	if (g.edge)
		reinterpret_cast<uint32_t *>(buf)[g.eb / 4] = g.ew | zi;
	return buf + g.mis;
}

__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_q6k_kernel(const uint8_t *__restrict__ w, int n, int k, const float *__restrict__ x,
		float *__restrict__ y)
{
	__shared__ __align__(16) float xs[Q6_KMAX / KC * XS];
	__shared__ __align__(16) uint8_t stg[GEMV_WARPS][Q6_STAGE];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int row = blockIdx.x * GEMV_WARPS + warp;
	const size_t rb = row_bytes(X4_T_Q6_K, k);
	/* every load first: the row (before the wait: a weight, pdl.cuh), then
	 * x (k % 256 == 0, four float4 a thread) */
	stage4_regs<Q6_ROWB> g;
	stage4_load<Q6_ROWB>(g, w + (size_t)min(row, n - 1) * rb, (int)rb, lane);
	x4p::trigger();
	x4p::wait();
	constexpr int XV = Q6_KMAX / 4 / (GEMV_WARPS * 32);
	float4 xv[XV];
	xwhole_load<XV>(xv, x, k);
	const uint32_t zi = __float_as_uint(xwhole_zero<XV>(xv, stage4_zero<Q6_ROWB>(g, 0.f)));
	xwhole_store<XV>(xs, xv, k, zi); /* then the stores */
	const uint8_t *p = stage4_store<Q6_ROWB>(g, stg[warp], zi, lane);
	__syncwarp();
	__syncthreads();
	float acc[1] = { 0.f };
	for (int k0 = 0, c = 0; k0 < k; k0 += KC, c++)
		chunk_dot<X4_T_Q6_K, 1>(p + row_bytes(X4_T_Q6_K, k0), k - k0 < KC ? k - k0 : KC, xs + c * XS,
					 lane, acc);
	acc[0] = x4c::warp_sum(acc[0]);
	if (row < n && lane == 0)
		y[row] = acc[0];
}

/* ---- Q6_K: R rows a warp ----
 * gemv_q6k_kernel is held by the L1's pipe, not by DRAM (bench/RESULTS.md
 * 25, 33: 38% of the read ceiling, the memory pipes 92% busy): for every 4
 * weights a lane reads 4 x values and two halves each of a ql and a qh word
 * from shared memory, 2 loads a weight.  Here a warp takes R adjacent rows
 * and q6k_group_rows reads each x value once for the R rows and a row's
 * words one load each, 2 + 4 / R loads a 4-weight step of a row instead of
 * 8.  The R rows are one contiguous span, copied into shared memory by
 * span_copy before the wait (weights, pdl.cuh); a row's lanes then sum
 * chunk after chunk exactly as chunk_dot does, so every row has the bits of
 * gemv_q6k_kernel.  A warp past the last row copies the last row and
 * writes nothing; so does a row of a warp's R past it (the last row's bytes
 * read again).
 *
 * Shared memory: x whole (padded as xwhole_store lays it), then a span a
 * warp at the same offset modulo 16 as in global memory. */
__host__ __device__ constexpr int q6r_x_bytes(int k)
{
	return ((k + k / 32) * 4 + 15) / 16 * 16;
}

__host__ __device__ constexpr int q6r_span_bytes(int rows, int rb)
{
	return (rows * rb + 12 + 15) / 16 * 16; /* + the offset (4, 8 or 12) */
}

/* 16 and 4 bytes from global src to shared dst (both aligned to that):
 * cp.async on sm_80 and later, nothing through registers and the thread
 * going on at once (copy_wait waits for its own copies); a load and a
 * store below. */
__device__ __forceinline__ void copy16(uint8_t *dst, const uint8_t *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	x4m::cp_async16(x4m::smem_u32(dst), src, 16);
#else
	*reinterpret_cast<uint4 *>(dst) = __ldcs(reinterpret_cast<const uint4 *>(src));
#endif
}

__device__ __forceinline__ void copy4(uint8_t *dst, const uint8_t *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	x4m::cp_async4(x4m::smem_u32(dst), src);
#else
	*reinterpret_cast<uint32_t *>(dst) = __ldcs(reinterpret_cast<const uint32_t *>(src));
#endif
}

__device__ __forceinline__ void copy_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	x4m::cp_async_commit();
	x4m::cp_async_wait<0>();
#endif
}

/* n bytes at src (global, 4-byte aligned, n % 4 == 0, n >= 16) into buf
 * (shared, 16-byte aligned) at the same offset modulo 16, as stage4 lays
 * them: whole 16-byte lines 16 bytes a copy, the words of a ragged first
 * and last line 4 (lanes 0-3 and 4-7), never reading outside [src, src +
 * n).  Returns where src's first byte lands; the bytes are there for the
 * warp after copy_wait in every lane and a barrier. */
__device__ __forceinline__ const uint8_t *span_copy(uint8_t *buf, const uint8_t *src, int n, int lane)
{
	const int mis = (int)((uintptr_t)src & 15), end = mis + n;
	const uint8_t *s0 = src - mis;
	for (int l = (mis ? 1 : 0) + lane; l < end >> 4; l += 32)
		copy16(buf + 16 * l, s0 + 16 * l);
	const int o = lane < 4 ? 4 * lane : (end & ~15) + 4 * (lane - 4);
	if (lane < 8 && (lane < 4 ? mis != 0 && o >= mis : (end & 15) != 0 && o < end))
		copy4(buf + o, s0 + o);
	return buf + mis;
}

/* R == 4: two blocks an SM (the head's 106 KiB of shared memory a block
 * allows no more); R == 2: three. */
template <int R>
__global__ void __launch_bounds__(GEMV_WARPS * 32, R == 4 ? 2 : 3)
gemv_q6k_rows_kernel(const uint8_t *__restrict__ w, int n, int k, const float *__restrict__ x,
		     float *__restrict__ y)
{
	extern __shared__ __align__(16) uint8_t q6r_smem[];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rb = (int)row_bytes(X4_T_Q6_K, k);
	float *xs = reinterpret_cast<float *>(q6r_smem);
	const int row0 = (blockIdx.x * GEMV_WARPS + warp) * R;
	const int first = min(row0, n - 1), rows = min(R, n - first);
	const uint8_t *p = span_copy(q6r_smem + q6r_x_bytes(k) + warp * q6r_span_bytes(R, rb),
				     w + (size_t)first * rb, rows * rb, lane);
	x4p::trigger();
	x4p::wait();
	constexpr int XV = Q6_KMAX / 4 / (GEMV_WARPS * 32);
	float4 xv[XV];
	xwhole_load<XV>(xv, x, k);
	const uint32_t zi = __float_as_uint(xwhole_zero<XV>(xv, 0.f));
	xwhole_store<XV>(xs, xv, k, zi);
	const uint32_t e = iq4_consts_of(zi).e; /* q6k_group_rows' 0x4b000000 */
	copy_wait();
	__syncthreads();
	float acc[R];
#pragma unroll
	for (int r = 0; r < R; r++)
		acc[r] = 0.f;
	/* chunk_dot's lane: group `lane` of each 1024-value chunk, the chunk
	 * it does not reach skipped */
	for (int k0 = 0, c = 0; k0 + 32 * lane < k; k0 += KC, c++) {
		const uint8_t *q[R];
#pragma unroll
		for (int r = 0; r < R; r++)
			q[r] = p + min(r, rows - 1) * rb + row_bytes(X4_T_Q6_K, k0) + 210 * (lane >> 3);
		q6k_group_rows<R>(q, lane & 7, xs + c * XS + 33 * lane, e, acc);
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
		const float sum = x4c::warp_sum(acc[r]);
		if (lane == r && row0 + r < n)
			y[row0 + r] = sum;
	}
}

namespace {
std::atomic<int> q6k_rows{ 4 }; /* x4k_q6k_rows_set */
}

extern "C" void x4k_q6k_rows_set(int rows) { q6k_rows.store(rows == 1 || rows == 2 ? rows : 4); }

extern "C" int x4k_q6k_rows_get(void) { return q6k_rows.load(); }

/* gemv_q6k_rows_kernel<R> for a shape gemv_q6k_kernel takes; false where
 * the device does not give a block its shared memory (the caller then runs
 * gemv_q6k_kernel). */
template <int R>
static bool gemv_q6k_rows(const uint8_t *w, int n, int k, const float *x, float *y, cudaStream_t s)
{
	static std::atomic<size_t> set[64];
	const int rb = (int)row_bytes(X4_T_Q6_K, k);
	const size_t bytes = q6r_x_bytes(k) + (size_t)GEMV_WARPS * q6r_span_bytes(R, rb);
	if (!tcv::smem_optin(gemv_q6k_rows_kernel<R>, bytes, set))
		return false;
	const unsigned blocks = (unsigned)((n + GEMV_WARPS * R - 1) / (GEMV_WARPS * R));
	x4p::launch(gemv_q6k_rows_kernel<R>, dim3(blocks), dim3(GEMV_WARPS * 32), bytes, s, w, n, k, x, y);
	return true;
}

namespace {
std::atomic<int> q6k_tc{ 0 }; /* x4k_q6k_tc_set */
}

extern "C" void x4k_q6k_tc_set(int tiles) { q6k_tc.store(tiles == 1 || tiles == 2 || tiles == -1 ? tiles : 0); }

extern "C" int x4k_q6k_tc_get(void) { return q6k_tc.load(); }

extern "C" int x4k_gemv(int type, const void *w, int n, int k, const float *x, float *y,
			cudaStream_t s, x4_err *e)
{
	int rc = check_matrix("x4k_gemv", type, w, n, k, e);
	if (rc)
		return rc;
	if (!x || !y)
		return x4_err_set(e, X4_EINVAL, "x4k_gemv: NULL input or output");
	if (n == 0)
		return 0;
	dim3 grid((unsigned)((n + GEMV_WARPS - 1) / GEMV_WARPS)), block(GEMV_WARPS * 32);
	const uint8_t *wb = static_cast<const uint8_t *>(w);
	switch (type) {
	case X4_T_IQ4_NL:
		if (!tcv::lib_gemv(w, n, k, x, y, s))
			gemv_kernel<X4_T_IQ4_NL><<<grid, block, 0, s>>>(wb, n, k, x, y);
		break;
	case X4_T_Q6_K:
		if (k <= Q6_KMAX && row_bytes(X4_T_Q6_K, k) % 4 == 0 && !((uintptr_t)w & 3) &&
		    !((uintptr_t)x & 15)) { /* rows 4-byte aligned: an even count of 210-byte blocks */
			const int rows = q6k_rows.load(); /* the largest form the card takes */
			const int tc = q6k_tc.load(); /* the tensor cores first, the most tiles the card takes */
			if (!((tc == 0 || tc == q6t::NST) && q6t::gemv<q6t::NST>(wb, n, k, x, y, s)) &&
			    !((tc == 0 || tc == 1) && q6t::gemv<1>(wb, n, k, x, y, s)) &&
			    !(rows >= 4 && gemv_q6k_rows<4>(wb, n, k, x, y, s)) &&
			    !(rows >= 2 && gemv_q6k_rows<2>(wb, n, k, x, y, s)))
				x4p::launch(gemv_q6k_kernel, grid, block, 0, s, wb, n, k, x, y);
		} else
			gemv_kernel<X4_T_Q6_K><<<grid, block, 0, s>>>(wb, n, k, x, y);
		break;
	default:
		if (!gemv_bf16_launch(w, n, k, x, y, s))
			gemv_kernel<X4_T_BF16><<<grid, block, 0, s>>>(wb, n, k, x, y);
		break;
	}
	return x4_cuda_launched("x4k_gemv: launch", e);
}

extern "C" int x4k_gemv2(int type, const void *w1, int n1, float *y1, const void *w2, int n2,
			 float *y2, int k, const float *x, cudaStream_t s, x4_err *e)
{
	int rc = check_matrix("x4k_gemv2", type, w1, n1, k, e);
	if (!rc)
		rc = check_matrix("x4k_gemv2", type, w2, n2, k, e);
	if (rc)
		return rc;
	if (!x || !y1 || !y2)
		return x4_err_set(e, X4_EINVAL, "x4k_gemv2: NULL input or output");
	if (n1 == 0 || n2 == 0 || (long long)n1 + n2 > 0x7fffffff || type != X4_T_BF16 ||
	    !gemv_bf16_launch(w1, n1, k, x, y1, s, w2, n2, y2)) {
		/* one launch each: the same per-row arithmetic */
		if ((rc = x4k_gemv(type, w1, n1, k, x, y1, s, e)))
			return rc;
		return x4k_gemv(type, w2, n2, k, x, y2, s, e);
	}
	return x4_cuda_launched("x4k_gemv2: launch", e);
}

extern "C" int x4k_gemv_swiglu(int type, const void *w_gate, const void *w_up, int n, int k,
			       const float *x, float *g, float *u, float *h, cudaStream_t s, x4_err *e)
{
	int rc = check_matrix("x4k_gemv_swiglu gate", type, w_gate, n, k, e);
	if (!rc)
		rc = check_matrix("x4k_gemv_swiglu up", type, w_up, n, k, e);
	if (rc)
		return rc;
	if (!x || !h)
		return x4_err_set(e, X4_EINVAL, "x4k_gemv_swiglu: NULL input or output");
	if (n == 0)
		return 0;
	if (type == X4_T_IQ4_NL && tcv::lib_gemv_swiglu(w_gate, w_up, n, k, x, h, s))
		return x4_cuda_launched("x4k_gemv_swiglu: tensor-core launch", e);
	if (type == X4_T_IQ4_NL && k % 256 == 0 && k / 256 <= IQ_THREADS && !((uintptr_t)w_gate & 15) &&
	    !((uintptr_t)w_up & 15) && !((uintptr_t)x & 15)) {
		const int S = IQ_THREADS / (k / 256);
		x4p::launch(gemv_iq4_swiglu_kernel, dim3((unsigned)((n + S - 1) / S)), dim3(IQ_THREADS), 0,
			    s, static_cast<const uint8_t *>(w_gate), static_cast<const uint8_t *>(w_up), n,
			    k, reinterpret_cast<const float4 *>(x), h);
		return x4_cuda_launched("x4k_gemv_swiglu: launch", e);
	}
	if (!g || !u)
		return x4_err_set(e, X4_EINVAL, "x4k_gemv_swiglu: %s %d x %d takes the scratch g and u",
				  x4_type_name(type), n, k);
	if ((rc = x4k_gemv(type, w_gate, n, k, x, g, s, e)) || (rc = x4k_gemv(type, w_up, n, k, x, u, s, e)))
		return rc;
	return x4k_swiglu(n, g, u, h, s, e);
}
