/*
 * chain.cu - the kernel lab for the step's boundaries: the 160 BF16
 * attention projections of the 40 blocks (q_a, kv_a, q_b, attn_output,
 * distinct weights a block, 1.94 GB) chained as the step runs them and
 * captured into one CUDA graph, with programmatic dependent launch off and
 * on (x4k_pdl_set; kernels/pdl.cuh).  Bytes: every weight once; the L2 is
 * flushed before every replay.  The old variant is the chain with the
 * staged gemv of 317feb9.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/chain [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"
#include "old/quant_dev_317.cuh"

struct mat {
	int n, k;
};

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times 40 blocks of attention projections as one graph");
	const int NB = 40;
	const mat m[4] = { { 768, 3584 }, { 576, 3584 }, { 6144, 768 }, { 3584, 4096 } };
	std::vector<void *> w;
	double bytes = 0;
	for (int b = 0; b < NB; b++)
		for (int i = 0; i < 4; i++) {
			size_t nb = (size_t)m[i].n * m[i].k * 2;
			uint16_t *p = lab_half(nb / 2, 100 + 4 * b + i, false);
			w.push_back(p);
			bytes += (double)nb;
		}
	float *x = lab_f32(3584, 1), *cq = lab_f32(768, 2), *kva = lab_f32(576, 3);
	float *q = lab_f32(6144, 4), *o = lab_f32(4096, 5), *y = lab_f32(3584, 6);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	auto chain = [&](bool old) {
		for (int b = 0; b < NB; b++) {
			void *const *wb = &w[4 * b];
			const float *in[4] = { x, x, cq, o };
			float *out[4] = { cq, kva, q, y };
			for (int i = 0; i < 4; i++) {
				if (old)
					x4d_317::gemv(X4_T_BF16, wb[i], m[i].n, m[i].k, in[i], out[i], L.s);
				else
					LAB_X4(x4k_gemv(X4_T_BF16, wb[i], m[i].n, m[i].k, in[i], out[i], L.s, &e),
					       e);
			}
		}
	};
	auto graphed = [&](bool old, int pdl, const char *variant) {
		x4k_pdl_set(pdl);
		cudaGraph_t g;
		cudaGraphExec_t ge;
		LAB_CK(cudaStreamBeginCapture(L.s, cudaStreamCaptureModeThreadLocal));
		chain(old);
		LAB_CK(cudaStreamEndCapture(L.s, &g));
		LAB_CK(cudaGraphInstantiate(&ge, g, 0));
		lab_row(&L, "chain", variant, "40x_attn_bf16_graph", bytes,
			lab_time_us(&L, [&] { LAB_CK(cudaGraphLaunch(ge, L.s)); }));
		LAB_CK(cudaGraphExecDestroy(ge));
		LAB_CK(cudaGraphDestroy(g));
		x4k_pdl_set(0);
	};
	if (L.run_old)
		graphed(true, 0, "old");
	if (L.run_new) {
		graphed(false, 0, "new");
		graphed(false, 1, "new+pdl");
	}
	return 0;
}
