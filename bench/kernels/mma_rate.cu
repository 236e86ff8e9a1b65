/*
 * mma_rate.cu - the kernel lab's probe of the card's mma.sync rate: how many
 * tensor-core flops a second the instruction forms x4's kernels issue can
 * reach when nothing else limits them (operands in registers, CH
 * independent accumulator chains a warp, 16 warps an SM).  The decode
 * attention's 32,768-token goal asks ~485 TFLOP/s of fp16 m16n8k16
 * (bench/RESULTS.md 46); this says whether mma.sync can give that or only
 * wgmma could.  Bytes 0; tflops = 2 x M x N x K x the MMAs / the time.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/mma_rate [new]
 */
#include "lab.h"
#include "mma_dev.cuh"
#include "gemv_tc.cuh"

namespace {

constexpr int WARPS = 8, ITERS = 2048;

/* OP 0: fp16 m16n8k16 (fp32 accumulators), 1: BF16 m16n8k16, 2: s8
 * m16n8k32 (s32), 3: u8 x s8 m16n8k16 (s32; the head's, lever-head-tc);
 * CH chains a warp, ITERS steps each. */
template <int OP, int CH>
__global__ void __launch_bounds__(WARPS * 32) mma_loop(float *out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	const uint32_t z = threadIdx.x * 0x9e3779b9u;
	const uint32_t a[4] = { z & 0x3bff3bffu, (z >> 3) & 0x3bff3bffu, (z >> 5) & 0x3bff3bffu,
				(z >> 7) & 0x3bff3bffu };
	const uint32_t b0 = (z >> 9) & 0x3bff3bffu, b1 = (z >> 11) & 0x3bff3bffu;
	float f[CH][4];
	int s[CH][4];
#pragma unroll
	for (int c = 0; c < CH; c++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			f[c][r] = 0.f, s[c][r] = 0;
	for (int i = 0; i < ITERS; i++)
#pragma unroll
		for (int c = 0; c < CH; c++) {
			if (OP == 0)
				x4m::mma16816(f[c], a, b0, b1);
			else if (OP == 1)
				x4m::mma_bf16(f[c], a, b0, b1);
			else if (OP == 2)
				tcv::mma16832_s8(s[c], a, b0, b1);
			else
				x4m::mma16816_u8s8(s[c], a[0], a[1], b0, s[c]);
		}
	float t = 0.f;
#pragma unroll
	for (int c = 0; c < CH; c++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			t += f[c][r] + (float)s[c][r];
	if (t == 1234.5f) /* never: keeps the chains */
		out[0] = t;
#endif
}

template <int OP, int CH>
void row(lab &L, int sms, float *out, const char *variant, double flops_per_mma)
{
	char shape[64];
	snprintf(shape, sizeof shape, "chains%d_warps%d_sm", CH, 2 * WARPS);
	const double us = lab_time_us(&L, [&] { mma_loop<OP, CH><<<2 * sms, WARPS * 32, 0, L.s>>>(out); });
	lab_row(&L, "mma", variant, shape, 0, us, flops_per_mma * CH * ITERS * WARPS * 2.0 * sms);
}

} /* namespace */

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "the card's mma.sync rate, operands in registers");
	int dev = 0, sms = 0;
	LAB_CK(cudaGetDevice(&dev));
	LAB_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	float *out = (float *)lab_alloc(16);
	if (L.run_new) {
		row<0, 2>(L, sms, out, "f16_m16n8k16", 4096.0);
		row<0, 4>(L, sms, out, "f16_m16n8k16", 4096.0);
		row<0, 8>(L, sms, out, "f16_m16n8k16", 4096.0);
		row<1, 4>(L, sms, out, "bf16_m16n8k16", 4096.0);
		row<2, 4>(L, sms, out, "s8_m16n8k32", 8192.0);
		row<3, 4>(L, sms, out, "u8s8_m16n8k16", 4096.0);
	}
	LAB_CK(cudaFree(out));
	return 0;
}
