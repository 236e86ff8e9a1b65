/*
 * gemm_quant.cu - prefill matrix-matrix products Y = X W^T for IQ4_NL, Q6_K
 * and BF16 weights (x4_kern.h section 1), on two cores:
 *   - the tensor-core core (gemm_mma.cuh), on sm_80 and later for IQ4_NL
 *     and BF16 where the shape allows (x4m::mma_shape): a block owns 128
 *     rows x 64 tokens, fp32-accurate products (docs/numerics.md 1.10);
 *   - the FMA core (quant_dev.cuh) everywhere else (sm_75, Q6_K, odd
 *     shapes, and x4k_gemm_mma_set(0)): a block owns 64 rows x 64 tokens,
 *     each 32-wide slice of its weight rows dequantized once into shared
 *     memory and used by all 64 tokens, with fp32 FMAs.
 * This file also holds the switch between them (x4k_gemm_mma_set) and the
 * per-device check that the experts' prefill tiles (moe_experts.cu) share.
 */
#include <atomic>

#include "cuda_check.h"
#include "x4_kern.h"
#include "quant_dev.cuh"
#include "gemm_mma.cuh"

using namespace x4d;

namespace {
std::atomic<int> mma_on{ 1 };
std::atomic<int> tc_copy_block{ 1 }; /* x4k_tc_copy_set */
constexpr int MAX_DEV = 64;
std::atomic<int> dev_cc[MAX_DEV]; /* 0: not looked up; else the major version + 1 */
}

extern "C" void x4k_gemm_mma_set(int on) { mma_on.store(on ? 1 : 0); }

extern "C" int x4k_gemm_mma_get(void) { return mma_on.load(); }

extern "C" void x4k_tc_copy_set(int block) { tc_copy_block.store(block ? 1 : 0); }

extern "C" int x4k_tc_copy_get(void) { return tc_copy_block.load(); }

bool x4m::enabled()
{
	if (!mma_on.load())
		return false;
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEV) {
		(void)cudaGetLastError();
		return false;
	}
	int cc = dev_cc[dev].load();
	if (!cc) {
		int major = 0;
		if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
			(void)cudaGetLastError();
			return false;
		}
		cc = major + 1;
		dev_cc[dev].store(cc);
	}
	return cc - 1 >= 8;
}

/* The tensor-core tile: rows blockIdx.x * 128.., tokens blockIdx.y * 64..
 * (x4m::mma_tile), y written fp32.  Empty below sm_80 (never launched there). */
template <int TYPE>
__global__ void __launch_bounds__(x4m::THREADS, 2)
gemm_mma_kernel(const uint8_t *__restrict__ w, int n, int k, int n_tok, const float *__restrict__ x,
		float *__restrict__ y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	using F = x4m::mma_fmt<TYPE>;
	extern __shared__ __align__(16) uint8_t mma_smem[];
	const float **xrow = reinterpret_cast<const float **>(mma_smem + F::SMEM - x4m::TOKS * 8);
	const int n0 = blockIdx.x * x4m::ROWS, t0 = blockIdx.y * x4m::TOKS;
	const int nt = min(n_tok - t0, x4m::TOKS);
	if (threadIdx.x < x4m::TOKS) /* read after mma_tile's first barrier */
		xrow[threadIdx.x] = x + (size_t)(t0 + min((int)threadIdx.x, nt - 1)) * k;
	const size_t rb = row_bytes(TYPE, k);
	const x4m::mma_rows R = { { w, w }, { w + (size_t)n * rb, w + (size_t)n * rb }, n, n0, rb };
	float acc[2][4][4];
	x4m::mma_tile<TYPE, 1>(mma_smem, R, xrow, k, acc);
	x4m::tile_store(acc, n0, [&](int row, int t, float v) {
		if (row < n && t < nt)
			y[(size_t)(t0 + t) * n + row] = v;
	});
#endif
}

/* The tensor-core launch, where the device takes it; false: nothing launched. */
template <int TYPE>
static bool gemm_mma(const uint8_t *w, int n, int k, int n_tok, const float *x, float *y, cudaStream_t s)
{
	constexpr int smem = x4m::mma_fmt<TYPE>::SMEM;
	if (!x4m::kernel_ready<gemm_mma_kernel<TYPE>>(smem))
		return false;
	dim3 grid((unsigned)((n + x4m::ROWS - 1) / x4m::ROWS), (unsigned)((n_tok + x4m::TOKS - 1) / x4m::TOKS));
	gemm_mma_kernel<TYPE><<<grid, x4m::THREADS, smem, s>>>(w, n, k, n_tok, x, y);
	return true;
}

template <int TYPE>
__global__ void __launch_bounds__(GEMM_THREADS)
gemm_kernel(const uint8_t *__restrict__ w, int n, int k, int n_tok, const float *__restrict__ x,
	    float *__restrict__ y)
{
	__shared__ __align__(16) uint8_t smem[gemm_smem<1>::BYTES];
	const float **xrow = reinterpret_cast<const float **>(smem + gemm_smem<1>::BYTES - TT * 8);
	const int n0 = blockIdx.x * TN, t0 = blockIdx.y * TT;
	const int nt = n_tok - t0 < TT ? n_tok - t0 : TT;
	if (threadIdx.x < TT) /* read after gemm_block's first barrier */
		xrow[threadIdx.x] = x + (size_t)(t0 + min((int)threadIdx.x, nt - 1)) * k;
	const uint8_t *const wm[1] = { w };
	float acc[1][4][4];
	gemm_block<TYPE, 1>(smem, wm, n, k, n0, xrow, nt, acc);
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
	for (int j = 0; j < 4; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int r = n0 + tx + 16 * i, t = ty + 16 * j;
			if (r < n && t < nt)
				y[(size_t)(t0 + t) * n + r] = acc[0][i][j];
		}
}

extern "C" int x4k_gemm(int type, const void *w, int n, int k, int n_tok, const float *x,
			float *y, cudaStream_t s, x4_err *e)
{
	int rc = check_matrix("x4k_gemm", type, w, n, k, e);
	if (rc)
		return rc;
	if (n_tok < 0 || (n_tok + TT - 1) / TT > 65535 || (n + TN - 1) / TN > 0x7fffffff)
		return x4_err_set(e, X4_EINVAL, "x4k_gemm: %d tokens is out of range", n_tok);
	if (!x || !y)
		return x4_err_set(e, X4_EINVAL, "x4k_gemm: NULL input or output");
	if (n == 0 || n_tok == 0)
		return 0;
	const uint8_t *wb = static_cast<const uint8_t *>(w);
	if ((type == X4_T_IQ4_NL || type == X4_T_BF16) && x4m::mma_shape(k, w, x) && x4m::enabled() &&
	    (type == X4_T_IQ4_NL ? gemm_mma<X4_T_IQ4_NL>(wb, n, k, n_tok, x, y, s)
				 : gemm_mma<X4_T_BF16>(wb, n, k, n_tok, x, y, s)))
		return x4_cuda_launched("x4k_gemm: launch", e);
	dim3 grid((unsigned)((n + TN - 1) / TN), (unsigned)((n_tok + TT - 1) / TT)), block(GEMM_THREADS);
	switch (type) {
	case X4_T_IQ4_NL:
		gemm_kernel<X4_T_IQ4_NL><<<grid, block, 0, s>>>(wb, n, k, n_tok, x, y);
		break;
	case X4_T_Q6_K:
		gemm_kernel<X4_T_Q6_K><<<grid, block, 0, s>>>(wb, n, k, n_tok, x, y);
		break;
	default:
		gemm_kernel<X4_T_BF16><<<grid, block, 0, s>>>(wb, n, k, n_tok, x, y);
		break;
	}
	return x4_cuda_launched("x4k_gemm: launch", e);
}
