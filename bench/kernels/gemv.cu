/*
 * gemv.cu - the kernel lab for the decode matrix-vector products y = W x
 * (x4k_gemv): the staged kernel of 317feb9 (old/quant_dev_317.cuh) against
 * the library's (new: BF16 split-K, the IQ4_NL register core, Q6_K staged)
 * at every shape of the model's decode step, and q_a with kv_a in one
 * launch (x4k_gemv2), and gate, up and SwiGLU in one launch
 * (x4k_gemv_swiglu), L2 flushed between repetitions.  Bytes are the weights' (x and y add under 0.2%).
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/gemv [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"
#include "old/quant_dev_317.cuh"

struct shape {
	int type, n, k;
	const char *name;
};

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times x4k_gemv at the model's shapes");
	const shape shapes[] = {
		{ X4_T_BF16, 768, 3584, "attn_q_a" },     { X4_T_BF16, 576, 3584, "attn_kv_a_mqa" },
		{ X4_T_BF16, 6144, 768, "attn_q_b" },     { X4_T_BF16, 3584, 4096, "attn_output" },
		{ X4_T_BF16, 16384, 128, "k_b_as_gemv" }, { X4_T_BF16, 4096, 512, "v_b_as_gemv" },
		{ X4_T_IQ4_NL, 1024, 3584, "shexp_gate_up" }, { X4_T_IQ4_NL, 3584, 1024, "shexp_down" },
		{ X4_T_IQ4_NL, 9216, 3584, "dense_gate_up" }, { X4_T_IQ4_NL, 3584, 9216, "dense_down" },
		{ X4_T_Q6_K, 131072, 3584, "output_head" },
	};
	x4_err e = { 0 };
	for (const shape &sh : shapes) {
		size_t wb = x4_type_bytes(sh.type, (uint64_t)sh.n * sh.k);
		void *w = lab_alloc(wb);
		if (sh.type == X4_T_BF16)
			lab_fill_half<<<1024, 256>>>((uint16_t *)w, wb / 2, 7, false);
		else
			lab_bytes(w, wb, 7);
		float *x = lab_f32((size_t)sh.k, 8), *y = (float *)lab_alloc((size_t)sh.n * 4);
		LAB_CK(cudaDeviceSynchronize());
		char nm[96];
		snprintf(nm, sizeof nm, "%s_%s_%dx%d", sh.name, x4_type_name(sh.type), sh.n, sh.k);
		if (L.run_old)
			lab_row(&L, "gemv", "old", nm, (double)wb, lab_time_us(&L, [&] {
					x4d_317::gemv(sh.type, w, sh.n, sh.k, x, y, L.s);
				}));
		if (L.run_new)
			lab_row(&L, "gemv", "new", nm, (double)wb, lab_time_us(&L, [&] {
					LAB_X4(x4k_gemv(sh.type, w, sh.n, sh.k, x, y, L.s, &e), e);
				}));
		for (int tc = 1; tc >= -1 && L.run_new && sh.type == X4_T_Q6_K; tc -= 2) {
			/* the library's other Q6_K forms: the tensor cores with one tile
			 * in flight a block (tc1), the rows form (rows) */
			x4k_q6k_tc_set(tc);
			lab_row(&L, "gemv", tc == 1 ? "tc1" : "rows", nm, (double)wb, lab_time_us(&L, [&] {
					LAB_X4(x4k_gemv(sh.type, w, sh.n, sh.k, x, y, L.s, &e), e);
				}));
		}
		x4k_q6k_tc_set(0);
		LAB_CK(cudaFree(w));
		LAB_CK(cudaFree(x));
		LAB_CK(cudaFree(y));
	}
	{ /* q_a and kv_a share x: two launches (old), one (x4k_gemv2) */
		const int n1 = 768, n2 = 576, k = 3584;
		size_t b1 = (size_t)n1 * k * 2, b2 = (size_t)n2 * k * 2;
		uint16_t *w1 = lab_half(b1 / 2, 9, false), *w2 = lab_half(b2 / 2, 10, false);
		float *x = lab_f32((size_t)k, 11), *y1 = (float *)lab_alloc((size_t)n1 * 4);
		float *y2 = (float *)lab_alloc((size_t)n2 * 4);
		LAB_CK(cudaDeviceSynchronize());
		const char *nm = "attn_q_a+kv_a_BF16_1344x3584";
		if (L.run_old)
			lab_row(&L, "gemv", "old", nm, (double)(b1 + b2), lab_time_us(&L, [&] {
					x4d_317::gemv(X4_T_BF16, w1, n1, k, x, y1, L.s);
					x4d_317::gemv(X4_T_BF16, w2, n2, k, x, y2, L.s);
				}));
		if (L.run_new)
			lab_row(&L, "gemv", "new", nm, (double)(b1 + b2), lab_time_us(&L, [&] {
					LAB_X4(x4k_gemv2(X4_T_BF16, w1, n1, y1, w2, n2, y2, k, x, L.s, &e), e);
				}));
	}
	{ /* gate, up and SwiGLU: three launches (old), one (x4k_gemv_swiglu) */
		const int shapes2[2][2] = { { 1024, 3584 }, { 9216, 3584 } };
		for (const auto &sh : shapes2) {
			const int n = sh[0], k = sh[1];
			size_t wb = x4_type_bytes(X4_T_IQ4_NL, (uint64_t)n * k);
			void *wg = lab_alloc(wb), *wu = lab_alloc(wb);
			lab_bytes(wg, wb, 12);
			lab_bytes(wu, wb, 13);
			float *x = lab_f32((size_t)k, 14), *g = (float *)lab_alloc((size_t)n * 4);
			float *u = (float *)lab_alloc((size_t)n * 4), *h = (float *)lab_alloc((size_t)n * 4);
			LAB_CK(cudaDeviceSynchronize());
			char nm[96];
			snprintf(nm, sizeof nm, "gate+up+swiglu_IQ4_NL_2x%dx%d", n, k);
			if (L.run_old)
				lab_row(&L, "gemv", "old", nm, 2.0 * wb, lab_time_us(&L, [&] {
						x4d_317::gemv(X4_T_IQ4_NL, wg, n, k, x, g, L.s);
						x4d_317::gemv(X4_T_IQ4_NL, wu, n, k, x, u, L.s);
						x4k_swiglu(n, g, u, h, L.s, &e);
					}));
			if (L.run_new)
				lab_row(&L, "gemv", "new", nm, 2.0 * wb, lab_time_us(&L, [&] {
						LAB_X4(x4k_gemv_swiglu(X4_T_IQ4_NL, wg, wu, n, k, x, g, u, h, L.s,
								       &e), e);
					}));
			LAB_CK(cudaFree(wg));
			LAB_CK(cudaFree(wu));
			LAB_CK(cudaFree(x));
			LAB_CK(cudaFree(g));
			LAB_CK(cudaFree(u));
			LAB_CK(cudaFree(h));
		}
	}
	return 0;
}
