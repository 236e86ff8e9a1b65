/*
 * moe_experts.cu - the routed experts as one grouped kernel family, used at
 * prefill and at decode (x4_kern.h section 1; docs/record.md 4).
 *
 * A block takes one tile of the route table (up to `tile` routes of one
 * expert) and a slice of output rows.  gate and up are computed together
 * and the SwiGLU product is written fp32 to the route's row of h (h rows in
 * route-table order); down reads those rows and writes route t*k+s's output
 * to row t*k+s of `out`: every element has exactly one writer, and every
 * sum inside runs in a fixed order, so the answer is the same on every run
 * and for any permutation of the routes within an expert.  The top-k sum is
 * a separate reduction in ascending expert id (docs/forward.md 7.3).
 *
 * The kernels are templated on the experts' block format (IQ4_NL as
 * released, Q8_0), as the GEMV and GEMM are.
 *
 * Tiles of 64 routes use a gemm core: on sm_80 and later the tensor-core
 * core (gemm_mma.cuh: 128 weight rows x the tile's routes, fp32-accurate
 * products, docs/numerics.md 1.10; gate/up as 64 rows of each, so the
 * lane holding g holds u), elsewhere (or x4k_gemm_mma_set(0)) the FMA core
 * (a dequantized weight slice reused by 64 routes); tiles of at most 4
 * use the gemv core (each weight row read
 * once for the tile's 1 or 4 routes), and tiles of one route (every tile of
 * the batch-1 decode step) the row-staged gemv core where the shape allows:
 * the same bits as the gemv core, all of a warp's rows in flight at once.
 * A one-token call of x4k_moe_experts_sum takes the tensor cores instead
 * (kernels/gemv_tc.cuh) where the products' switch and the shapes allow.
 */
#include "cuda_check.h"
#include "x4_kern.h"
#include "quant_dev.cuh"
#include "gemm_mma.cuh"
#include "gemv_tc.cuh"

using namespace x4d;

#ifdef X4_TCV_TRACE
/* A trace build (make X4_TRACE_MOE=1): with X4_MOE_TRACE=FILE in the
 * environment, the first one-token x4k_moe_experts_sum points the tensor-core
 * launches' stamps (gemv_tc.cuh's tcv_trace_gu and tcv_trace_dn) at two
 * buffers, which every later launch overwrites, and at exit FILE gets the
 * last launches' stamps, a line a block: kernel, block, its
 * tcv::TRACE_WORDS words (gemv_tc.cuh says which is which).  FILE is
 * written whole or not at all (a temporary file renamed over it).  In a step
 * captured as a graph the kernels read the pointers when they run, so the
 * file holds the step's last MoE layer; run with --graph off all the same
 * (the buffers are allocated at the first call, which must not be inside a
 * capture).  bench/moe_step_trace.py summarises it. */
#include <stdio.h>
#include <stdlib.h>
#include <vector>
namespace {
constexpr size_t TRACE_BLOCKS = 8192, TRACE_BYTES = TRACE_BLOCKS * tcv::TRACE_WORDS * 8;
unsigned long long *trace_buf[2];
void trace_dump()
{
	constexpr size_t W = tcv::TRACE_WORDS;
	const char *path = getenv("X4_MOE_TRACE");
	std::vector<unsigned long long> h[2];
	bool ok = true;
	for (int k = 0; ok && k < 2; k++) {
		h[k].resize(TRACE_BLOCKS * W);
		ok = cudaMemcpy(h[k].data(), trace_buf[k], TRACE_BYTES, cudaMemcpyDeviceToHost) == cudaSuccess;
	}
	if (!ok || !tcv::tcv_trace_write(path, h[0].data(), TRACE_BLOCKS, h[1].data(), TRACE_BLOCKS))
		fprintf(stderr, "x4: X4_MOE_TRACE: %s not written (its folder, or the stamps' read-back)\n",
			path);
}
void trace_arm()
{
	static bool armed;
	if (armed || !getenv("X4_MOE_TRACE"))
		return;
	armed = true;
	bool ok = true;
	for (int k = 0; ok && k < 2; k++)
		ok = cudaMalloc(&trace_buf[k], TRACE_BYTES) == cudaSuccess &&
		     cudaMemset(trace_buf[k], 0, TRACE_BYTES) == cudaSuccess;
	ok = ok && cudaMemcpyToSymbol(tcv::tcv_trace_gu, &trace_buf[0], sizeof trace_buf[0]) == cudaSuccess &&
	     cudaMemcpyToSymbol(tcv::tcv_trace_dn, &trace_buf[1], sizeof trace_buf[1]) == cudaSuccess;
	if (ok)
		atexit(trace_dump);
	else
		fprintf(stderr, "x4: X4_MOE_TRACE: no trace: the stamps' buffers could not be set up (%s)\n",
			cudaGetErrorString(cudaGetLastError()));
}
} /* namespace */
#endif

#define SMALL_NV 4

using x4route::MAX_K;

/* The tile's expert, first route index and route count; false past the end. */
__device__ __forceinline__ bool tile_of(const x4k_moe_routes &r, int *ex, int *start, int *cnt)
{
	const int t = blockIdx.x;
	if (t >= *r.n_tiles)
		return false;
	*ex = r.tile_expert[t];
	*start = r.tile_start[t];
	const int left = r.offsets[*ex + 1] - *start;
	*cnt = left < r.tile ? left : r.tile;
	return true;
}

/* ---- decode shape: gemv core ---- */

template <int T_EXP, int NV>
__device__ __forceinline__ void gu_gemv(uint8_t *smem, const float *const *xsrc, const uint8_t *g,
					const uint8_t *u, int row, int d, int f, int start, int cnt, float *h)
{
	const uint8_t *const wr[2] = { g, u };
	float acc[2][NV];
	gemv_block<T_EXP, NV, 2>(smem, wr, row, d, xsrc, acc);
	if (row >= 0 && (threadIdx.x & 31) == 0)
#pragma unroll
		for (int v = 0; v < NV; v++)
			if (v < cnt)
				h[(size_t)(start + v) * f + row] = silu(acc[0][v]) * acc[1][v];
}

/* Tiles of one route (every tile of a batch-1 decode step) take the row-
 * staged core, gemv_rows, where the shape allows (rows_held): a gate/up
 * warp holds its output's gate and up rows in registers (row_lines::GU
 * 16-byte lines a lane a row), a down warp DOWN_ROWS adjacent rows
 * (row_lines::DOWN lines a lane).  At the released shapes (d 3584, f 1024)
 * both are 7168 values a warp: 4032 bytes in IQ4_NL (8 loads a lane), 7616
 * in Q8_0 (15).  DOWN_ROWS = 7 puts 56 of the d = 3584 rows in a block, 64
 * blocks a tile: a token's 4 tiles are 256 blocks, one wave of at most 2 a
 * SM on the H200's 132 SMs, as even as that count allows (4 rows a warp
 * would be 448 blocks, 3 or 4 a SM: the SMs with 4 set the time).  gate/up
 * keeps gemv_block's 8 outputs a block: 512 blocks, one wave at 4 a SM,
 * which IQ4_NL's 64 registers a thread allow (BLOCKS: the bound that holds
 * the compiler to them; Q8_0's 16 lines a lane need ~120, 2 a SM).
 * Shared memory is gemv_block's for SMALL_NV vectors either way
 * (gemv_rows): x of up to SMALL_NV * KC = 4096 values whole (16.5 KiB) and
 * a chunk a matrix a warp: gate/up 25.8 KiB in IQ4_NL, 33.8 in Q8_0; down
 * 21.1 and 25.1; under the 48 KiB of static shared memory. */
#define DOWN_ROWS 7
template <int T_EXP> struct row_lines {
	enum { GU = (3584 / fmt<T_EXP>::BE * fmt<T_EXP>::BB / 16 + 31) / 32,
	       DOWN = (DOWN_ROWS * 1024 / fmt<T_EXP>::BE * fmt<T_EXP>::BB / 16 + 31) / 32,
	       BLOCKS = T_EXP == X4_T_IQ4_NL ? 4 : 2 };
};
static_assert(gemv_smem<X4_T_Q8_0, SMALL_NV, 2>::BYTES + SMALL_NV * 8 <= 48 * 1024 &&
	      gemv_smem<X4_T_IQ4_NL, SMALL_NV, 2>::BYTES + SMALL_NV * 8 <= 48 * 1024,
	      "the experts' gemv blocks in static shared memory");

/* rows: 1 where gemv_rows takes gate and up (rows_held), else 0. */
template <int T_EXP>
__global__ void __launch_bounds__(GEMV_WARPS * 32, row_lines<T_EXP>::BLOCKS)
moe_gu_gemv(x4k_moe_routes r, const float *__restrict__ x, int d, int f, const uint8_t *__restrict__ gate,
	    const uint8_t *__restrict__ up, float *__restrict__ h, int rows)
{
	__shared__ __align__(16) uint8_t smem[gemv_smem<T_EXP, SMALL_NV, 2>::BYTES];
	__shared__ const float *xsrc[SMALL_NV];
	int ex, start, cnt;
	if (!tile_of(r, &ex, &start, &cnt))
		return;
	const int row = blockIdx.y * GEMV_WARPS + (threadIdx.x >> 5);
	const bool ok = row < f;
	const size_t rb = row_bytes(T_EXP, d), at = ((size_t)ex * f + (ok ? row : 0)) * rb;
	if (cnt == 1 && rows) {
		const uint8_t *const wr[2] = { gate + at, up + at };
		const float *xt = x + (size_t)(r.route[start] / r.k) * d;
		gemv_rows<T_EXP, SMALL_NV, 2, row_lines<T_EXP>::GU>(
			smem, wr, ok ? 1 : 0, d, xt, [&](int, const float (&s)[2]) {
				if ((threadIdx.x & 31) == 0)
					h[(size_t)start * f + row] = silu(s[0]) * s[1];
			});
		return;
	}
	if (threadIdx.x < SMALL_NV) /* read after gemv_block's first barrier */
		xsrc[threadIdx.x] = (int)threadIdx.x < cnt
			? x + (size_t)(r.route[start + threadIdx.x] / r.k) * d : nullptr;
	if (cnt == 1)
		gu_gemv<T_EXP, 1>(smem, xsrc, gate + at, up + at, ok ? row : -1, d, f, start, cnt, h);
	else
		gu_gemv<T_EXP, SMALL_NV>(smem, xsrc, gate + at, up + at, ok ? row : -1, d, f, start, cnt, h);
}

template <int T_EXP, int NV>
__device__ __forceinline__ void down_gemv(uint8_t *smem, const float *const *xsrc, const uint8_t *w,
					  int row, int d, int f, const int32_t *route, int cnt,
					  float *out)
{
	const uint8_t *const wr[1] = { w };
	float acc[1][NV];
	gemv_block<T_EXP, NV, 1>(smem, wr, row, f, xsrc, acc);
	if (row >= 0 && (threadIdx.x & 31) == 0)
#pragma unroll
		for (int v = 0; v < NV; v++)
			if (v < cnt)
				out[(size_t)route[v] * d + row] = acc[0][v];
}

/* rows: DOWN_ROWS or fewer where gemv_rows takes the down rows (rows_held),
 * a warp's rows in a tile of one route, else 0.  The grid's y is d / (8 *
 * rows) blocks where every tile is one route, d / 8 where some may hold
 * more; a tile of several routes walks its row groups of 8 over whatever y
 * the grid has, and a tile of one stops past its d / (8 * rows). */
template <int T_EXP>
__global__ void __launch_bounds__(GEMV_WARPS * 32, row_lines<T_EXP>::BLOCKS)
moe_down_gemv(x4k_moe_routes r, int d, int f, const uint8_t *__restrict__ down,
	      const float *__restrict__ h, float *__restrict__ out, int rows)
{
	__shared__ __align__(16) uint8_t smem[gemv_smem<T_EXP, SMALL_NV, 1>::BYTES];
	__shared__ const float *xsrc[SMALL_NV];
	int ex, start, cnt;
	if (!tile_of(r, &ex, &start, &cnt))
		return;
	const size_t rb = row_bytes(T_EXP, f);
	if (cnt == 1 && rows) {
		if ((int)blockIdx.y * GEMV_WARPS * rows >= d)
			return;
		const int row0 = ((int)blockIdx.y * GEMV_WARPS + (int)(threadIdx.x >> 5)) * rows;
		const int n = min(max(d - row0, 0), rows);
		const uint8_t *const wr[1] = { down + ((size_t)ex * d + (n ? row0 : 0)) * rb };
		float *o = out + (size_t)r.route[start] * d + row0;
		gemv_rows<T_EXP, SMALL_NV, 1, row_lines<T_EXP>::DOWN>(
			smem, wr, n, f, h + (size_t)start * f, [&](int i, const float (&s)[1]) {
				if ((threadIdx.x & 31) == 0)
					o[i] = s[0];
			});
		return;
	}
	if (threadIdx.x < SMALL_NV)
		xsrc[threadIdx.x] = (int)threadIdx.x < cnt ? h + (size_t)(start + threadIdx.x) * f : nullptr;
	for (int g = blockIdx.y; g * GEMV_WARPS < d; g += gridDim.y) {
		const int row = g * GEMV_WARPS + (threadIdx.x >> 5);
		const bool ok = row < d;
		const uint8_t *w = down + ((size_t)ex * d + (ok ? row : 0)) * rb;
		if (cnt == 1)
			down_gemv<T_EXP, 1>(smem, xsrc, w, ok ? row : -1, d, f, r.route + start, cnt, out);
		else
			down_gemv<T_EXP, SMALL_NV>(smem, xsrc, w, ok ? row : -1, d, f, r.route + start, cnt,
						   out);
	}
}

/* One slot of the top-k sum: the reduce kernel's and the one-token fused
 * down's (moe_down_sum_kernel) one expression, so both give the same bits. */
__device__ __forceinline__ float slot_add(float acc, float w, float o) { return acc + w * o; }

/* ---- one token: every route's down and the shared expert's, summed ----
 * y[row] = sum over the tiles (one route each, in ascending expert id: the
 * table's order) of wts * (W_down[ex][row] . h[route]), then + W_sdown[row]
 * . sh: moe_down_gemv's row-staged products, the shared down's gemv_kernel
 * product and moe_reduce's sum in one launch, the same operations in the
 * same order (the same bits), and no per-route rows written.  A warp takes
 * SUM_ROWS rows; its rows of every matrix (up to SMALL_NV routes and the
 * shared one) are loaded into registers first, then the block stages the
 * NM input vectors (f <= KC values each) behind one barrier.  Shared memory:
 * NM padded vectors and a chunk a matrix a warp, 43.8 KiB in IQ4_NL (Q8_0's
 * longer chunks do not fit the 48 KiB: it keeps the three launches). */
constexpr int SUM_ROWS = 2, SUM_NM = SMALL_NV + 1;

template <int T_EXP>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
moe_down_sum_kernel(x4k_moe_routes r, int d, int f, const uint8_t *__restrict__ down,
		    const float *__restrict__ h, const uint8_t *__restrict__ sdown,
		    const float *__restrict__ sh, float *__restrict__ y)
{
	using S = gemv_smem<T_EXP, SUM_NM, SUM_NM>;
	static_assert(S::BYTES <= 48 * 1024, "static shared memory");
	__shared__ __align__(16) uint8_t smem[S::BYTES];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nt = min(*r.n_tiles, SMALL_NV), rb = (int)row_bytes(T_EXP, f), nl = rb / 16;
	const int row0 = ((int)blockIdx.x * GEMV_WARPS + warp) * SUM_ROWS;
	const uint8_t *base[SUM_NM];
	const float *xsrc[SUM_NM];
	float wt[SMALL_NV];
#pragma unroll
	for (int m = 0; m < SMALL_NV; m++) {
		const int st = m < nt ? r.tile_start[m] : 0;
		base[m] = m < nt ? down + (size_t)r.tile_expert[m] * d * rb : nullptr;
		xsrc[m] = m < nt ? h + (size_t)st * f : nullptr;
		wt[m] = m < nt ? r.wts[r.route[st]] : 0.f;
	}
	base[SMALL_NV] = sdown, xsrc[SMALL_NV] = sh;
	uint4 v[SUM_NM][SUM_ROWS][2];
#pragma unroll
	for (int m = 0; m < SUM_NM; m++)
#pragma unroll
		for (int q = 0; q < SUM_ROWS; q++)
#pragma unroll
			for (int i = 0; i < 2; i++) {
				const int l = lane + 32 * i;
				v[m][q][i] = base[m] && row0 + q < d && l < nl
					? __ldcs(reinterpret_cast<const uint4 *>(base[m] + (size_t)(row0 + q) * rb) + l)
					: make_uint4(0u, 0u, 0u, 0u);
			}
	float4 xv[SUM_NM][1];
#pragma unroll
	for (int m = 0; m < SUM_NM; m++)
		if (xsrc[m])
			xwhole_load<1>(xv[m], xsrc[m], f);
	float z = 0.f;
#pragma unroll
	for (int m = 0; m < SUM_NM; m++) {
		if (xsrc[m])
			z = xwhole_zero<1>(xv[m], z);
#pragma unroll
		for (int q = 0; q < SUM_ROWS; q++)
			z = __fmaf_rn(__uint_as_float(v[m][q][0].x & 0x007fffffu), 0.f, z);
	}
	float *xs = reinterpret_cast<float *>(smem);
#pragma unroll
	for (int m = 0; m < SUM_NM; m++)
		if (xsrc[m])
			xwhole_store<1>(xs + m * XS, xv[m], f, __float_as_uint(z));
	__syncthreads();
	uint8_t *stg = smem + S::X + warp * SUM_NM * S::STAGE;
#pragma unroll
	for (int q = 0; q < SUM_ROWS; q++) {
		const int row = row0 + q;
		if (row >= d) /* uniform over the warp */
			break;
#pragma unroll
		for (int m = 0; m < SUM_NM; m++)
#pragma unroll
			for (int i = 0; i < 2; i++)
				if (base[m] && lane + 32 * i < nl)
					reinterpret_cast<uint4 *>(stg + m * S::STAGE)[lane + 32 * i] = v[m][q][i];
		__syncwarp();
		float dot[SUM_NM];
#pragma unroll
		for (int m = 0; m < SUM_NM; m++) {
			float a[1] = { 0.f };
			if (base[m])
				chunk_dot<T_EXP, 1>(stg + m * S::STAGE, f, xs + m * XS, lane, a);
			dot[m] = x4c::warp_sum(a[0]);
		}
		__syncwarp(); /* the staging buffer is rewritten by the next row */
		if (lane == 0) {
			float acc = 0.f;
#pragma unroll
			for (int m = 0; m < SMALL_NV; m++)
				if (m < nt)
					acc = slot_add(acc, wt[m], dot[m]);
			if (sdown)
				acc += dot[SMALL_NV];
			y[row] = acc;
		}
	}
}

/* (A one-token path on the IQ4_NL register core of quant_dev.cuh was
 * measured slower than the staged gemv tiles above on the H200, 47.2
 * against 40.8 us for one token's four experts, and dropped:
 * bench/RESULTS.md 14.) */

/* ---- prefill shape: gemm core ---- */

template <int T_EXP>
__global__ void __launch_bounds__(GEMM_THREADS)
moe_gu_gemm(x4k_moe_routes r, const float *__restrict__ x, int d, int f, const uint8_t *__restrict__ gate,
	    const uint8_t *__restrict__ up, float *__restrict__ h)
{
	__shared__ __align__(16) uint8_t smem[gemm_smem<2>::BYTES];
	const float **xrow = reinterpret_cast<const float **>(smem + gemm_smem<2>::BYTES - TT * 8);
	int ex, start, cnt;
	if (!tile_of(r, &ex, &start, &cnt))
		return;
	if (threadIdx.x < TT) /* read after gemm_block's first barrier */
		xrow[threadIdx.x] = x + (size_t)(r.route[start + min((int)threadIdx.x, cnt - 1)] / r.k) * d;
	const size_t at = (size_t)ex * f * row_bytes(T_EXP, d);
	const uint8_t *const wm[2] = { gate + at, up + at };
	const int n0 = blockIdx.y * TN;
	float acc[2][4][4];
	gemm_block<T_EXP, 2>(smem, wm, f, d, n0, xrow, cnt, acc);
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
	for (int j = 0; j < 4; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int row = n0 + tx + 16 * i, t = ty + 16 * j;
			if (row < f && t < cnt)
				h[(size_t)(start + t) * f + row] = silu(acc[0][i][j]) * acc[1][i][j];
		}
}

template <int T_EXP>
__global__ void __launch_bounds__(GEMM_THREADS)
moe_down_gemm(x4k_moe_routes r, int d, int f, const uint8_t *__restrict__ down,
	      const float *__restrict__ h, float *__restrict__ out)
{
	__shared__ __align__(16) uint8_t smem[gemm_smem<1>::BYTES];
	const float **xrow = reinterpret_cast<const float **>(smem + gemm_smem<1>::BYTES - TT * 8);
	int ex, start, cnt;
	if (!tile_of(r, &ex, &start, &cnt))
		return;
	if (threadIdx.x < TT)
		xrow[threadIdx.x] = h + (size_t)(start + min((int)threadIdx.x, cnt - 1)) * f;
	const uint8_t *const wm[1] = { down + (size_t)ex * d * row_bytes(T_EXP, f) };
	const int n0 = blockIdx.y * TN;
	float acc[1][4][4];
	gemm_block<T_EXP, 1>(smem, wm, d, f, n0, xrow, cnt, acc);
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
	for (int j = 0; j < 4; j++) {
		const int t = ty + 16 * j;
		if (t >= cnt)
			continue;
		const size_t o = (size_t)r.route[start + t] * d;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int row = n0 + tx + 16 * i;
			if (row < d)
				out[o + row] = acc[0][i][j];
		}
	}
}

/* ---- prefill shape: the tensor-core core (sm_80 and later; empty below) ---- */

/* gate and up of 64 rows (blockIdx.y * 64..) for the tile's routes: tile
 * rows 0..63 gate, 64..127 up (x4m::tile_row<2>), h = silu(g) * u as
 * moe_gu_gemm writes it. */
template <int T_EXP>
__global__ void __launch_bounds__(x4m::THREADS, 2)
moe_gu_mma(x4k_moe_routes r, const float *__restrict__ x, int d, int f, const uint8_t *__restrict__ gate,
	   const uint8_t *__restrict__ up, float *__restrict__ h)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	using F = x4m::mma_fmt<T_EXP>;
	extern __shared__ __align__(16) uint8_t mma_smem[];
	const float **xrow = reinterpret_cast<const float **>(mma_smem + F::SMEM - x4m::TOKS * 8);
	int ex, start, cnt;
	if (!tile_of(r, &ex, &start, &cnt))
		return;
	if (threadIdx.x < x4m::TOKS) /* read after mma_tile's first barrier */
		xrow[threadIdx.x] = x + (size_t)(r.route[start + min((int)threadIdx.x, cnt - 1)] / r.k) * d;
	const size_t rb = row_bytes(T_EXP, d), at = (size_t)ex * f * rb, mb = (size_t)f * rb;
	const int n0 = blockIdx.y * (x4m::ROWS / 2);
	const x4m::mma_rows R = { { gate + at, up + at }, { gate + at + mb, up + at + mb }, f, n0, rb };
	float acc[2][4][4];
	x4m::mma_tile<T_EXP, 2>(mma_smem, R, xrow, d, acc);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int wm = warp & 3, wn = warp >> 2, g = lane >> 2, c = lane & 3;
#pragma unroll
	for (int j = 0; j < 4; j++)
#pragma unroll
		for (int q = 0; q < 4; q++) {
			const int row = n0 + x4m::row_index<2>(x4m::tile_row<2>(wm, 0, g, q >> 1));
			const int t = 32 * wn + 8 * j + 2 * c + (q & 1);
			if (row < f && t < cnt)
				h[(size_t)(start + t) * f + row] = silu(acc[0][j][q]) * acc[1][j][q];
		}
#endif
}

/* down, 128 rows (blockIdx.y * 128..) for the tile's routes, each route's
 * row of out as moe_down_gemm writes it. */
template <int T_EXP>
__global__ void __launch_bounds__(x4m::THREADS, 2)
moe_down_mma(x4k_moe_routes r, int d, int f, const uint8_t *__restrict__ down, const float *__restrict__ h,
	     float *__restrict__ out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	using F = x4m::mma_fmt<T_EXP>;
	extern __shared__ __align__(16) uint8_t mma_smem[];
	const float **xrow = reinterpret_cast<const float **>(mma_smem + F::SMEM - x4m::TOKS * 8);
	int ex, start, cnt;
	if (!tile_of(r, &ex, &start, &cnt))
		return;
	if (threadIdx.x < x4m::TOKS)
		xrow[threadIdx.x] = h + (size_t)(start + min((int)threadIdx.x, cnt - 1)) * f;
	const size_t rb = row_bytes(T_EXP, f), mb = (size_t)d * rb;
	const uint8_t *w = down + (size_t)ex * mb;
	const int n0 = blockIdx.y * x4m::ROWS;
	const x4m::mma_rows R = { { w, w }, { w + mb, w + mb }, d, n0, rb };
	float acc[2][4][4];
	x4m::mma_tile<T_EXP, 1>(mma_smem, R, xrow, f, acc);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int wm = warp & 3, wn = warp >> 2, g = lane >> 2, c = lane & 3;
#pragma unroll
	for (int j = 0; j < 4; j++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int t = 32 * wn + 8 * j + 2 * c + e;
			if (t >= cnt)
				continue;
			float *o = out + (size_t)r.route[start + t] * d;
#pragma unroll
			for (int mt = 0; mt < 2; mt++)
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
					const int row = n0 + x4m::tile_row<1>(wm, mt, g, hh);
					if (row < d)
						o[row] = acc[mt][j][2 * hh + e];
				}
		}
#endif
}

/* The two tensor-core launches where the device and the shapes take them;
 * false: nothing launched (the FMA core runs). */
template <int T_EXP>
static bool launch_mma(const x4k_moe_routes *r, const float *x, int d, int f, const uint8_t *g8,
		       const uint8_t *u8, const uint8_t *d8, float *h, float *o, bool with_down,
		       cudaStream_t s)
{
	constexpr int smem = x4m::mma_fmt<T_EXP>::SMEM;
	if (!x4m::mma_shape(d, g8, x) || !x4m::mma_shape(d, u8, x) || !x4m::mma_shape(f, d8, h) ||
	    !x4m::enabled() || !x4m::kernel_ready<moe_gu_mma<T_EXP>>(smem) ||
	    !x4m::kernel_ready<moe_down_mma<T_EXP>>(smem))
		return false;
	const unsigned tiles = (unsigned)r->max_tiles;
	moe_gu_mma<T_EXP><<<dim3(tiles, (f + x4m::ROWS / 2 - 1) / (x4m::ROWS / 2)), x4m::THREADS, smem, s>>>(
		*r, x, d, f, g8, u8, h);
	if (with_down)
		moe_down_mma<T_EXP><<<dim3(tiles, (d + x4m::ROWS - 1) / x4m::ROWS), x4m::THREADS, smem, s>>>(
			*r, d, f, d8, h, o);
	return true;
}

/* ---- the top-k sum ---- */



/* y[t][c] = sum over t's slots in ascending expert id of wts * out, then
 * + shared.  The k slots are visited by repeated minimum (ids are distinct),
 * with every array index a compile-time constant. */
__global__ void moe_reduce_kernel(x4k_moe_routes r, const float *__restrict__ out,
				  const float *__restrict__ shared, int d, float *__restrict__ y)
{
	const int t = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
	x4p::trigger();
	x4p::wait();
	if (c >= d)
		return;
	const int k = r.k;
	int ex[MAX_K];
	float w[MAX_K];
#pragma unroll
	for (int s = 0; s < MAX_K; s++) {
		const int e = s < k ? r.sel[(size_t)t * k + s] : -1;
		ex[s] = e >= 0 && e < r.n_expert ? e : 0x7fffffff; /* dropped by the table */
		w[s] = s < k ? r.wts[(size_t)t * k + s] : 0.f;
	}
	float acc = 0.f;
	int prev = -1;
#pragma unroll
	for (int step = 0; step < MAX_K; step++) {
		int best = 0x7fffffff, bs = 0;
		float bw = 0.f;
#pragma unroll
		for (int s = 0; s < MAX_K; s++)
			if (ex[s] > prev && ex[s] < best) {
				best = ex[s];
				bs = s;
				bw = w[s];
			}
		if (best == 0x7fffffff)
			break;
		acc = slot_add(acc, bw, out[((size_t)t * k + bs) * d + c]);
		prev = best;
	}
	if (shared)
		acc += shared[(size_t)t * d + c];
	y[(size_t)t * d + c] = acc;
}

/* ---- entry points ---- */

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* The two products of one call on experts of type T_EXP. */
template <int T_EXP>
static int launch(const x4k_moe_routes *r, const float *x, int d, int f, const uint8_t *g8,
		  const uint8_t *u8, const uint8_t *d8, float *h, float *o, bool with_down,
		  cudaStream_t s, x4_err *e)
{
	const unsigned tiles = (unsigned)r->max_tiles;
	if (r->tile == TT && launch_mma<T_EXP>(r, x, d, f, g8, u8, d8, h, o, with_down, s))
		return x4_cuda_launched("x4k_moe_experts: tensor-core launch", e);
	if (r->tile == TT) {
		moe_gu_gemm<T_EXP><<<dim3(tiles, (f + TN - 1) / TN), GEMM_THREADS, 0, s>>>(*r, x, d, f, g8, u8, h);
		if (!with_down)
			return x4_cuda_launched("x4k_moe_experts: gate/up launch", e);
		X4_CUDA_TRY(cudaGetLastError(), "x4k_moe_experts: gate/up launch", e);
		moe_down_gemm<T_EXP><<<dim3(tiles, (d + TN - 1) / TN), GEMM_THREADS, 0, s>>>(*r, d, f, d8, h, o);
	} else {
		constexpr int GU = row_lines<T_EXP>::GU, DN = row_lines<T_EXP>::DOWN;
		const int gu_rows = rows_held<T_EXP, SMALL_NV, GU>(g8, d, 1) &&
				    rows_held<T_EXP, SMALL_NV, GU>(u8, d, 1) && !((uintptr_t)x & 15);
		const int dn_rows = rows_held<T_EXP, SMALL_NV, DN>(d8, f, DOWN_ROWS);
		/* every tile is one route where a tile takes one, or the call is one
		 * token (its k experts are distinct) */
		const bool ones = r->tile == 1 || r->n_tok == 1;
		const int dn_per = GEMV_WARPS * (ones && dn_rows ? dn_rows : 1);
		moe_gu_gemv<T_EXP><<<dim3(tiles, (f + GEMV_WARPS - 1) / GEMV_WARPS), GEMV_WARPS * 32, 0, s>>>(
			*r, x, d, f, g8, u8, h, gu_rows);
		if (!with_down)
			return x4_cuda_launched("x4k_moe_experts: gate/up launch", e);
		X4_CUDA_TRY(cudaGetLastError(), "x4k_moe_experts: gate/up launch", e);
		moe_down_gemv<T_EXP><<<dim3(tiles, (d + dn_per - 1) / dn_per), GEMV_WARPS * 32, 0, s>>>(
			*r, d, f, d8, h, o, dn_rows);
	}
	return x4_cuda_launched("x4k_moe_experts: down launch", e);
}

/* x4k_moe_experts' checks of its arguments. */
static int experts_check(const x4k_moe_routes *r, int type, const float *x, int d, int f, const void *gate,
			 const void *up, const void *down, void *ws, size_t ws_bytes, x4_err *e)
{
	if (!r || !x || !gate || !up || !down || !ws)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_experts: NULL argument");
	if (type != X4_T_IQ4_NL && type != X4_T_Q8_0)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_experts: expert weights are %s; the experts "
				  "take IQ4_NL or Q8_0", x4_type_name(type));
	int rc = check_geometry("x4k_moe_experts gate", type, gate, f, d, e);
	if (!rc)
		rc = check_geometry("x4k_moe_experts up", type, up, f, d, e);
	if (!rc)
		rc = check_geometry("x4k_moe_experts down", type, down, d, f, e);
	if (rc)
		return rc;
	if (r->tile != TT && (r->tile < 1 || r->tile > SMALL_NV))
		return x4_err_set(e, X4_EINVAL, "x4k_moe_experts: tile of %d routes; it must be 1..%d or %d",
				  r->tile, SMALL_NV, TT);
	const size_t need = x4k_moe_experts_workspace_bytes(r->n_tok, r->k, d, f);
	if (ws_bytes < need || ((uintptr_t)ws & 255))
		return x4_err_set(e, X4_EINVAL, "x4k_moe_experts: workspace of %zu bytes; need %zu, 256-aligned",
				  ws_bytes, need);
	return 0;
}

/* x4k_moe_experts after experts_check; with_down false: gate and up only
 * (h in ws), for the fused down of x4k_moe_experts_sum. */
static int experts(const x4k_moe_routes *r, int type, const float *x, int d, int f, const void *gate,
		   const void *up, const void *down, void *ws, const float **out, bool with_down,
		   cudaStream_t s, x4_err *e)
{
	const size_t nr = (size_t)r->n_tok * r->k;
	float *h = static_cast<float *>(ws);
	float *o = reinterpret_cast<float *>(static_cast<uint8_t *>(ws) + align256(nr * f * 4));
	if (out)
		*out = o;
	if (nr == 0)
		return 0;
	const uint8_t *g8 = static_cast<const uint8_t *>(gate), *u8 = static_cast<const uint8_t *>(up);
	const uint8_t *d8 = static_cast<const uint8_t *>(down);
	return type == X4_T_Q8_0 ? launch<X4_T_Q8_0>(r, x, d, f, g8, u8, d8, h, o, with_down, s, e)
				 : launch<X4_T_IQ4_NL>(r, x, d, f, g8, u8, d8, h, o, with_down, s, e);
}

extern "C" int x4k_moe_experts(const x4k_moe_routes *r, int type, const float *x, int d, int f,
			       const void *gate, const void *up, const void *down, void *ws,
			       size_t ws_bytes, const float **out, cudaStream_t s, x4_err *e)
{
	const int rc = experts_check(r, type, x, d, f, gate, up, down, ws, ws_bytes, e);
	return rc ? rc : experts(r, type, x, d, f, gate, up, down, ws, out, true, s, e);
}

/* The fused down applies: one token, at most SMALL_NV routes, IQ4_NL rows
 * of f <= KC values whole in 16-byte lines, the shared down of the same
 * type and shape. */
static bool sum_fits(const x4k_moe_routes *r, int type, int f, const void *down, const void *sdown,
		     int sdown_type, const float *h, const float *sh)
{
	return type == X4_T_IQ4_NL && sdown_type == type && r->n_tok == 1 && r->k <= SMALL_NV &&
	       f <= KC && f % 256 == 0 && !((uintptr_t)down & 15) && !((uintptr_t)sdown & 15) &&
	       !((uintptr_t)h & 15) && !((uintptr_t)sh & 15);
}

/* The shared expert's SwiGLU product into sh where x4k_moe_experts_sum's
 * tensor-core launch does not form it: x4k_gemv_swiglu, its scratch (where
 * the type needs any) lent by the workspace, which the experts write only
 * after it. */
static int shared_swiglu(int stype, const void *sgate, const void *sup, const float *x, int d, int f,
			 void *ws, size_t ws_bytes, float *sh, cudaStream_t s, x4_err *e)
{
	float *g = ws_bytes >= 2 * (size_t)f * 4 ? static_cast<float *>(ws) : nullptr;
	return x4k_gemv_swiglu(stype, sgate, sup, f, d, x, g, g ? g + f : nullptr, sh, s, e);
}

extern "C" int x4k_moe_experts_sum(const x4k_moe_routes *r, const x4k_moe_pick *pick, int type,
				   const float *x, int d, int f, const void *gate, const void *up,
				   const void *down, int stype,
				   const void *sgate, const void *sup, const void *sdown, float *sh,
				   void *ws, size_t ws_bytes, float *y, cudaStream_t s, x4_err *e)
{
	if (!r || !sdown || !sh || !y || !sgate != !sup || (pick && !pick->bias))
		return x4_err_set(e, X4_EINVAL, "x4k_moe_experts_sum: NULL argument");
	if (sgate && r->n_tok > 1)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_experts_sum: the shared gate and up of %d tokens; "
				  "one token's only", r->n_tok);
	float *h = static_cast<float *>(ws);
	if (!sum_fits(r, type, f, down, sdown, stype, h, sh)) {
		/* the shared product, then the three launches: the experts, the
		 * shared down into y, the sum in place */
		int rc = experts_check(r, type, x, d, f, gate, up, down, ws, ws_bytes, e);
		if (!rc && pick)
			rc = x4k_moe_select_table(r, pick, s, e);
		if (!rc && sgate && r->n_tok > 0)
			rc = shared_swiglu(stype, sgate, sup, x, d, f, ws, ws_bytes, sh, s, e);
		const float *out;
		if (!rc)
			rc = experts(r, type, x, d, f, gate, up, down, ws, &out, true, s, e); /* checked above */
		if (!rc)
			rc = x4k_gemv(stype, sdown, d, f, sh, y, s, e);
		return rc ? rc : x4k_moe_reduce(r, out, y, d, y, s, e);
	}
	int rc = check_geometry("x4k_moe_experts_sum shared down", stype, sdown, d, f, e);
	if (!rc && sgate)
		rc = check_geometry("x4k_moe_experts_sum shared gate", stype, sgate, f, d, e);
	if (!rc && sgate)
		rc = check_geometry("x4k_moe_experts_sum shared up", stype, sup, f, d, e);
	if (!rc)
		rc = experts_check(r, type, x, d, f, gate, up, down, ws, ws_bytes, e);
	if (rc || r->n_tok == 0)
		return rc;
	/* the tensor cores (gemv_tc.cuh) where the device, the switch and the
	 * shapes take both launches; the shared gate and up then ride in the
	 * first as one more column of blocks, and with pick its blocks select
	 * their experts themselves */
#ifdef X4_TCV_TRACE
	trace_arm();
#endif
	if (r->k > 0 && tcv::lib_moe_sum(r, pick, x, d, f, gate, up, down, h, sgate, sup, sdown, sh, y, s))
		return x4_cuda_launched("x4k_moe_experts_sum: tensor-core launches", e);
	if (pick && (rc = x4k_moe_select_table(r, pick, s, e)))
		return rc;
	if (sgate && (rc = shared_swiglu(stype, sgate, sup, x, d, f, ws, ws_bytes, sh, s, e)))
		return rc;
	if ((rc = experts(r, type, x, d, f, gate, up, down, ws, nullptr, false, s, e)))
		return rc;
	const unsigned blocks = (unsigned)((d + GEMV_WARPS * SUM_ROWS - 1) / (GEMV_WARPS * SUM_ROWS));
	moe_down_sum_kernel<X4_T_IQ4_NL><<<blocks, GEMV_WARPS * 32, 0, s>>>(
		*r, d, f, static_cast<const uint8_t *>(down), h, static_cast<const uint8_t *>(sdown), sh, y);
	return x4_cuda_launched("x4k_moe_experts_sum: down launch", e);
}

extern "C" int x4k_moe_reduce(const x4k_moe_routes *r, const float *out, const float *shared, int d,
			      float *y, cudaStream_t s, x4_err *e)
{
	if (!r || !out || !y || d <= 0 || r->k > MAX_K)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_reduce: NULL buffer, width %d or k %d", d,
				  r ? r->k : 0);
	if (r->n_tok == 0)
		return 0;
	if (r->n_tok > 65535)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_reduce: %d tokens; at most 65535 a call", r->n_tok);
	x4p::launch(moe_reduce_kernel, dim3((d + 255) / 256, r->n_tok), dim3(256), 0, s, *r, out, shared,
		    d, y);
	return x4_cuda_launched("x4k_moe_reduce: launch", e);
}
