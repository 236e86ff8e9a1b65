/*
 * mla_absorb.cu - the two per-head BF16 products around the absorbed
 * attention (docs/forward.md 6.4): q-tilde[h] = W_kb[h] q_nope[h] (512 x 128 a head) and
 * o[h] = W_vb[h] o-bar[h] (128 x 512 a head), on two cores:
 *   - a prefill chunk of at least MMA_MIN_TOK tokens, on sm_80 and later
 *     (x4m::enabled: the --gemm switch of the other prefill products) and
 *     where the shape allows: the tensor-core tile of gemm_mma.cuh, one
 *     head's 128 weight rows x 64 tokens a block, fp32-accurate products
 *     (docs/numerics.md 1.10);
 *   - everywhere else (the decode step's one token): a warp a weight row,
 *     the row held in registers while the warp walks the tokens; fp32 sums.
 */
#include "core_dev.cuh"
#include "gemm_mma.cuh"
#include "pdl.cuh"

namespace {

/* The RoPE of x4k_rope fused into the absorb's launch (x4k_mla_absorb_q_rope):
 * the pairs at in_off of x's vector b go to out_off of y's; omega NULL:
 * none. */
struct rope_job {
	const float *omega;
	const int *pos;
	int half, in_off, out_off;
};

/* The rope job's pairs for tokens [t0, t0 + nt) of vector b, by the block's
 * threads (rope_kernel's arithmetic, pair by pair). */
__device__ __forceinline__ void rope_part(const rope_job &rj, int t0, int nt, int b, const float *x,
					  long x_tok, int x_b, float *y, long y_tok, int y_b)
{
	for (int i = threadIdx.x; i < nt * rj.half; i += blockDim.x) {
		const int t = t0 + i / rj.half, j = i % rj.half;
		const float *z = x + t * x_tok + (long)b * x_b + rj.in_off;
		float *o = y + t * y_tok + (long)b * y_b + rj.out_off;
		float2 q = x4c::rope_pair(z[2 * j], z[2 * j + 1], *rj.pos + t, rj.omega[j]);
		o[2 * j] = q.x;
		o[2 * j + 1] = q.y;
	}
}

/* y[t][b][r] = sum_k W[b][r][k] x[t][b][k], k <= 64 * NP and even; with a
 * rope job, the grid's last column of blocks does it for vector b. */
template <int NP>
__global__ void __launch_bounds__(256)
bmv_kernel(int rows, int k, const uint16_t *__restrict__ W, int n_tok, const float *__restrict__ x,
	   long x_tok, int x_b, float *__restrict__ y, long y_tok, int y_b, rope_job rj)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int r = blockIdx.x * 8 + warp, b = blockIdx.y, kp = k / 2;
	const unsigned *w = reinterpret_cast<const unsigned *>(W + ((size_t)b * rows + (r < rows ? r : 0)) * k);
	float2 wr[NP]; /* the weight row first: it does not depend on the previous kernel */
#pragma unroll
	for (int j = 0; j < NP; j++) {
		int p = lane + 32 * j;
		wr[j] = p < kp ? x4c::bf16x2(__ldg(w + p)) : make_float2(0.f, 0.f);
	}
	x4p::trigger();
	x4p::wait(); /* every thread, before its row check returns (pdl.cuh) */
	if (rj.omega && blockIdx.x == gridDim.x - 1) {
		rope_part(rj, 0, n_tok, b, x, x_tok, x_b, y, y_tok, y_b);
		return;
	}
	if (r >= rows)
		return;
	for (int t = 0; t < n_tok; t++) {
		const float2 *xv = reinterpret_cast<const float2 *>(x + t * x_tok + (long)b * x_b);
		float acc = 0;
#pragma unroll
		for (int j = 0; j < NP; j++) {
			int p = lane + 32 * j;
			if (p < kp) {
				float2 v = xv[p];
				acc = fmaf(wr[j].x, v.x, acc);
				acc = fmaf(wr[j].y, v.y, acc);
			}
		}
		acc = x4c::warp_sum(acc);
		if (lane == 0)
			y[t * y_tok + (long)b * y_b + r] = acc;
	}
}

/* The 16-byte form of bmv_kernel, for k a power of two from 8 to 1024 with
 * 16-byte aligned weights and x rows: a row's C = k / 8 chunks go to LPR =
 * min(C, 32) lanes (CPL = C / LPR chunks a lane: 1 for the absorb's 128, 2
 * for the expand's 512), 32 / LPR rows a warp, the row's sum one shuffle
 * tree over its lanes.  bmv_kernel's 4-byte loads (a lane 8 or 32 bytes of
 * a row) went out as many small requests. */
template <int CPL>
__global__ void __launch_bounds__(256)
bmv16_kernel(int rows, int k, int lpr, const uint16_t *__restrict__ W, int n_tok,
	     const float *__restrict__ x, long x_tok, int x_b, float *__restrict__ y, long y_tok,
	     int y_b, rope_job rj)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = blockIdx.y;
	const int rpw = 32 / lpr, sub = lane / lpr, l = lane % lpr;
	const int r = (blockIdx.x * 8 + warp) * rpw + sub;
	const uint4 *w = reinterpret_cast<const uint4 *>(W + ((size_t)b * rows + (r < rows ? r : 0)) * k);
	uint4 wq[CPL]; /* the weight chunks first: they do not depend on the previous kernel */
#pragma unroll
	for (int j = 0; j < CPL; j++)
		wq[j] = __ldg(w + l + lpr * j);
	x4p::trigger();
	x4p::wait(); /* every thread, before its row check returns (pdl.cuh) */
	if (rj.omega && blockIdx.x == gridDim.x - 1) {
		rope_part(rj, 0, n_tok, b, x, x_tok, x_b, y, y_tok, y_b);
		return;
	}
	for (int t = 0; t < n_tok; t++) {
		const float4 *xv = reinterpret_cast<const float4 *>(x + t * x_tok + (long)b * x_b);
		float acc = 0;
#pragma unroll
		for (int j = 0; j < CPL; j++) {
			const int c = l + lpr * j;
			const float4 xa = __ldg(xv + 2 * c), xb = __ldg(xv + 2 * c + 1);
			const float2 w0 = x4c::bf16x2(wq[j].x), w1 = x4c::bf16x2(wq[j].y);
			const float2 w2 = x4c::bf16x2(wq[j].z), w3 = x4c::bf16x2(wq[j].w);
			acc = fmaf(w0.x, xa.x, acc);
			acc = fmaf(w0.y, xa.y, acc);
			acc = fmaf(w1.x, xa.z, acc);
			acc = fmaf(w1.y, xa.w, acc);
			acc = fmaf(w2.x, xb.x, acc);
			acc = fmaf(w2.y, xb.y, acc);
			acc = fmaf(w3.x, xb.z, acc);
			acc = fmaf(w3.y, xb.w, acc);
		}
		for (int o = lpr / 2; o; o >>= 1) /* the row's lanes only (lpr divides 32) */
			acc += __shfl_xor_sync(0xffffffffu, acc, o);
		if (l == 0 && r < rows)
			y[t * y_tok + (long)b * y_b + r] = acc;
	}
}

/* The chunks that take the tensor cores: below this many tokens a tile of
 * 64 would be mostly padding (bench/RESULTS.md 27 prices the crossover). */
constexpr int MMA_MIN_TOK = 16;

/* The tensor-core form of bmv: block x = vector b's row tile (rt of
 * row_tiles, 128 rows each) or, with a rope job, its rope (rt ==
 * row_tiles), block y the 64 tokens' tile.  The weights of vector b are a
 * rows x k BF16 matrix; x's rows are the token pointers (x + t x_tok + b
 * x_b). */
__global__ void __launch_bounds__(x4m::THREADS, 2)
bmm_kernel(int rows, int k, int row_tiles, const uint16_t *__restrict__ W, int n_tok,
	   const float *__restrict__ x, long x_tok, int x_b, float *__restrict__ y, long y_tok,
	   int y_b, rope_job rj)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	using F = x4m::mma_fmt<X4_T_BF16>;
	extern __shared__ __align__(16) uint8_t mma_smem[];
	const int per = row_tiles + (rj.omega ? 1 : 0);
	const int b = blockIdx.x / per, rt = blockIdx.x % per;
	const int t0 = blockIdx.y * x4m::TOKS, nt = min(n_tok - t0, x4m::TOKS);
	if (rt == row_tiles) {
		rope_part(rj, t0, nt, b, x, x_tok, x_b, y, y_tok, y_b);
		return;
	}
	const float **xrow = reinterpret_cast<const float **>(mma_smem + F::SMEM - x4m::TOKS * 8);
	if (threadIdx.x < x4m::TOKS) /* read after mma_tile's first barrier */
		xrow[threadIdx.x] = x + (size_t)(t0 + min((int)threadIdx.x, nt - 1)) * x_tok + (size_t)b * x_b;
	const size_t rb = 2 * (size_t)k;
	const uint8_t *w = reinterpret_cast<const uint8_t *>(W) + (size_t)b * rows * rb;
	const int n0 = rt * x4m::ROWS;
	const x4m::mma_rows R = { { w, w }, { w + (size_t)rows * rb, w + (size_t)rows * rb }, rows, n0, rb };
	float acc[2][4][4];
	x4m::mma_tile<X4_T_BF16, 1>(mma_smem, R, xrow, k, acc);
	float *yb = y + (size_t)b * y_b;
	x4m::tile_store(acc, n0, [&](int row, int t, float v) {
		if (row < rows && t < nt)
			yb[(size_t)(t0 + t) * y_tok + row] = v;
	});
#endif
}

/* The tensor-core launch, where the chunk, the shape and the device take
 * it; false: nothing launched. */
bool bmm(int batch, int rows, int k, const uint16_t *W, int n_tok, const float *x, long x_tok,
	 int x_b, float *y, long y_tok, int y_b, cudaStream_t s, const rope_job &rj)
{
	constexpr int smem = x4m::mma_fmt<X4_T_BF16>::SMEM;
	const int row_tiles = (rows + x4m::ROWS - 1) / x4m::ROWS;
	const long gx = (long)batch * (row_tiles + (rj.omega ? 1 : 0));
	const int gy = (n_tok + x4m::TOKS - 1) / x4m::TOKS;
	if (n_tok < MMA_MIN_TOK || !x4m::mma_shape(k, W, x) || x_tok % 4 || x_b % 4 || gx > 0x7fffffffL ||
	    gy > 65535 || !x4m::enabled() || !x4m::kernel_ready<bmm_kernel>(smem))
		return false;
	bmm_kernel<<<dim3((unsigned)gx, (unsigned)gy), x4m::THREADS, smem, s>>>(
		rows, k, row_tiles, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, rj);
	return true;
}

int bmv(int batch, int rows, int k, const uint16_t *W, int n_tok, const float *x, long x_tok,
	int x_b, float *y, long y_tok, int y_b, cudaStream_t s, const char *who, x4_err *e,
	rope_job rj = rope_job{ nullptr, nullptr, 0, 0, 0 })
{
	if (bmm(batch, rows, k, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, s, rj))
		return x4_cuda_launched(who, e);
	const int C = k / 8;
	if (k % 8 == 0 && C >= 1 && C <= 128 && !(C & (C - 1)) && !((uintptr_t)W & 15) &&
	    !((uintptr_t)x & 15) && x_tok % 4 == 0 && x_b % 4 == 0) {
		const int lpr = C < 32 ? C : 32, cpl = C / lpr, rpb = 8 * (32 / lpr);
		dim3 g((rows + rpb - 1) / rpb + (rj.omega ? 1 : 0), batch), b(256);
		switch (cpl) {
		case 1: x4p::launch(bmv16_kernel<1>, g, b, 0, s, rows, k, lpr, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, rj); break;
		case 2: x4p::launch(bmv16_kernel<2>, g, b, 0, s, rows, k, lpr, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, rj); break;
		default: x4p::launch(bmv16_kernel<4>, g, b, 0, s, rows, k, lpr, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, rj); break;
		}
		return x4_cuda_launched(who, e);
	}
	dim3 grid((rows + 7) / 8 + (rj.omega ? 1 : 0), batch);
	int np = (k / 2 + 31) / 32;
	const dim3 b(256);
	if (np <= 1)
		x4p::launch(bmv_kernel<1>, grid, b, 0, s, rows, k, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, rj);
	else if (np <= 2)
		x4p::launch(bmv_kernel<2>, grid, b, 0, s, rows, k, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, rj);
	else if (np <= 4)
		x4p::launch(bmv_kernel<4>, grid, b, 0, s, rows, k, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, rj);
	else
		x4p::launch(bmv_kernel<8>, grid, b, 0, s, rows, k, W, n_tok, x, x_tok, x_b, y, y_tok, y_b, rj);
	return x4_cuda_launched(who, e);
}

bool aligned8(const void *p) { return ((uintptr_t)p & 7) == 0; }

} /* namespace */

extern "C" int x4k_mla_absorb_q(int n_tok, int n_head, int kv_lora, int d_nope, int d_rope,
				const uint16_t *w_kb, const float *q, float *qt, cudaStream_t s,
				x4_err *e)
{
	if (n_tok < 0 || n_head < 1 || n_head > 65535 || kv_lora < 1 || d_nope < 2 ||
	    d_nope > 512 || d_nope % 2 || d_rope < 0 || d_rope % 2)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_absorb_q: bad shape (%d heads, kv_lora %d, "
				  "nope %d (even, <= 512), rope %d)", n_head, kv_lora, d_nope, d_rope);
	if (n_tok == 0)
		return 0;
	if (!w_kb || !q || !qt || !aligned8(q) || ((uintptr_t)w_kb & 3))
		return x4_err_set(e, X4_EINVAL, "x4k_mla_absorb_q: NULL or misaligned buffer");
	int dqk = d_nope + d_rope, cw = kv_lora + d_rope;
	return bmv(n_head, kv_lora, d_nope, w_kb, n_tok, q, (long)n_head * dqk, dqk, qt,
		   (long)n_head * cw, cw, s, "x4k_mla_absorb_q: launch", e);
}

extern "C" int x4k_mla_absorb_q_rope(int n_tok, int n_head, int kv_lora, int d_nope, int d_rope,
				     const uint16_t *w_kb, const float *q, float *qt, const float *omega,
				     const int *pos, cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || n_head < 1 || n_head > 65535 || kv_lora < 1 || d_nope < 2 ||
	    d_nope > 512 || d_nope % 2 || d_rope < 2 || d_rope % 2 || (long)n_tok * d_rope > (1L << 30))
		return x4_err_set(e, X4_EINVAL, "x4k_mla_absorb_q_rope: bad shape (%d heads, kv_lora %d, "
				  "nope %d (even, <= 512), rope %d (even))", n_head, kv_lora, d_nope, d_rope);
	if (n_tok == 0)
		return 0;
	if (!w_kb || !q || !qt || !omega || !pos || !aligned8(q) || ((uintptr_t)w_kb & 3))
		return x4_err_set(e, X4_EINVAL, "x4k_mla_absorb_q_rope: NULL or misaligned buffer");
	int dqk = d_nope + d_rope, cw = kv_lora + d_rope;
	return bmv(n_head, kv_lora, d_nope, w_kb, n_tok, q, (long)n_head * dqk, dqk, qt,
		   (long)n_head * cw, cw, s, "x4k_mla_absorb_q_rope: launch", e,
		   rope_job{ omega, pos, d_rope / 2, d_nope, kv_lora });
}

extern "C" int x4k_mla_expand_v(int n_tok, int n_head, int kv_lora, int d_v, const uint16_t *w_vb,
				const float *ob, float *o, cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || n_head < 1 || n_head > 65535 || kv_lora < 2 || kv_lora > 512 ||
	    kv_lora % 2 || d_v < 1)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_expand_v: bad shape (%d heads, kv_lora %d "
				  "(even, <= 512), d_v %d)", n_head, kv_lora, d_v);
	if (n_tok == 0)
		return 0;
	if (!w_vb || !ob || !o || !aligned8(ob) || ((uintptr_t)w_vb & 3))
		return x4_err_set(e, X4_EINVAL, "x4k_mla_expand_v: NULL or misaligned buffer");
	return bmv(n_head, d_v, kv_lora, w_vb, n_tok, ob, (long)n_head * kv_lora, kv_lora, o,
		   (long)n_head * d_v, d_v, s, "x4k_mla_expand_v: launch", e);
}
