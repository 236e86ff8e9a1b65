/*
 * gemm.cu - the kernel lab for the prefill products Y = X W^T (x4k_gemm,
 * kernels/gemm_quant.cu) at the model's dense shapes, for chunks of 512
 * and 4096 tokens: the dense FFN's and the shared expert's IQ4_NL gate/up
 * and down, the BF16 attention projections q_a, kv_a, q_b and attn_output.
 * Two variants, the library's two cores (x4k_gemm_mma_set): old the FMA
 * core (64 x 64 tiles, fp32 FMAs), new the tensor-core core (kernels/
 * gemm_mma.cuh, sm_80 and later: 128 x 64 tiles, mma.sync with fp32-accurate
 * products).  Before the timings of a shape, a check: the two cores'
 * outputs on the same data within 1e-4 of max|y| (normwise; the parity
 * tests, tests/gpu_kern/gemm_quant.h, hold each to the reference at
 * 1e-5 of the terms' magnitude), a "# check" line on stderr, exit 1 if
 * not.  The IQ4_NL weights are random bytes with every block's scale
 * made finite, X in [-1, 1].  L2 flushed between repetitions.
 * Bytes: the weights, X [T][k] and Y [T][n] fp32; tflops: 2 n k T.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/gemm [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"

struct shape {
	int type, n, k;
	const char *name;
};

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times x4k_gemm's two cores (old: FMA, new: tensor cores) for 512- "
		 "and 4096-token chunks at the model's shapes");
	const x4_config c = lab_model();
	const int toks[2] = { 512, 4096 };
	const shape shapes[] = {
		{ X4_T_IQ4_NL, c.n_ff, c.n_embd, "dense_gate_up" },
		{ X4_T_IQ4_NL, c.n_embd, c.n_ff, "dense_down" },
		{ X4_T_IQ4_NL, c.n_ff_exp, c.n_embd, "shexp_gate_up" },
		{ X4_T_IQ4_NL, c.n_embd, c.n_ff_exp, "shexp_down" },
		{ X4_T_BF16, c.q_lora, c.n_embd, "attn_q_a" },
		{ X4_T_BF16, c.kv_lora + c.d_rope, c.n_embd, "attn_kv_a_mqa" },
		{ X4_T_BF16, c.n_head * c.d_qk, c.q_lora, "attn_q_b" },
		{ X4_T_BF16, c.n_embd, c.n_head * c.d_v, "attn_output" },
	};
	x4_err e = { 0 };
	bool ok = true;
	for (const int T : toks)
		for (const shape &sh : shapes) {
			size_t wb = x4_type_bytes(sh.type, (uint64_t)sh.n * sh.k);
			void *w;
			if (sh.type == X4_T_BF16) {
				w = lab_alloc(wb);
				lab_fill_half<<<1024, 256>>>((uint16_t *)w, wb / 2, 41, false);
			} else {
				w = lab_blocks(sh.type, (size_t)sh.n, sh.k, 41);
			}
			float *x = lab_f32((size_t)T * sh.k, 42);
			float *y = (float *)lab_alloc((size_t)T * sh.n * 4);
			float *y2 = (float *)lab_alloc((size_t)T * sh.n * 4);
			LAB_CK(cudaDeviceSynchronize());
			char nm[96];
			snprintf(nm, sizeof nm, "%s_%s_%dx%d_t%d", sh.name, x4_type_name(sh.type), sh.n, sh.k, T);
			x4k_gemm_mma_set(0);
			LAB_X4(x4k_gemm(sh.type, w, sh.n, sh.k, T, x, y, L.s, &e), e);
			x4k_gemm_mma_set(1);
			LAB_X4(x4k_gemm(sh.type, w, sh.n, sh.k, T, x, y2, L.s, &e), e);
			LAB_CK(cudaStreamSynchronize(L.s));
			size_t bad;
			const double diff = lab_normwise_diff(y2, y, (size_t)T * sh.n, &bad);
			const bool same = diff <= 1e-4 && bad == 0;
			fprintf(stderr, "# check %s: max|new - old| / max|old| %.3g, %zu not finite: %s\n", nm, diff,
				bad, same ? "ok" : "DIFFER");
			ok = ok && same;
			double bytes = (double)wb + 4.0 * T * sh.k + 4.0 * T * sh.n, flops = 2.0 * sh.n * sh.k * T;
			for (int core = 0; core < 2; core++) {
				if (!(core ? L.run_new : L.run_old))
					continue;
				x4k_gemm_mma_set(core);
				lab_row(&L, "gemm", core ? "new" : "old", nm, bytes, lab_time_us(&L, [&] {
						LAB_X4(x4k_gemm(sh.type, w, sh.n, sh.k, T, x, y, L.s, &e), e);
					}), flops);
			}
			x4k_gemm_mma_set(1);
			LAB_CK(cudaFree(w));
			LAB_CK(cudaFree(x));
			LAB_CK(cudaFree(y));
			LAB_CK(cudaFree(y2));
		}
	fprintf(stderr, "# check: %s\n", ok ? "every shape ok" : "DIFFER");
	return ok ? 0 : 1;
}
