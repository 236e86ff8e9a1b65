/*
 * gpu_kern.c - parity of every kernel of kernels/ against its plain-C
 * reference (lib/ref/), at a tiny odd size (tails), the model's size and the
 * largest size.  Needs a GPU: run by `make test-gpu`.
 *
 * The cases of kernels/<op>.cu are tests/gpu_kern/<op>.h; what they share
 * (data, device buffers, the two comparisons and their tolerances) is
 * tests/gpu_harness.h.  A FAIL line names its op and case, and
 * `build/tests/gpu_kern OP[:CASE]` reruns just those (t.h): `gpu_kern
 * moe_router:nan-bias`, `gpu_kern rmsnorm:rows 7`.  Parity tests test; they
 * do not time: the kernels' timings are bench/kernels/'s.
 */
#include "gpu_harness.h"

static x4_config full; /* the released dimensions (x4_config_preset "full") */

#include "gpu_kern/embed.h"
#include "gpu_kern/norm.h"
#include "gpu_kern/head.h"
#include "gpu_kern/hc.h"
#include "gpu_kern/rope.h"
#include "gpu_kern/kv_store.h"
#include "gpu_kern/mla_absorb.h"
#include "gpu_kern/mla_attn.h"
#include "gpu_kern/mla_decode.h"
#include "gpu_kern/mla_prefill.h"
#include "gpu_kern/sample.h"
#include "gpu_kern/narrow.h"
#include "gpu_kern/gemv_quant.h"
#include "gpu_kern/gemm_quant.h"
#include "gpu_kern/swiglu.h"
#include "gpu_kern/moe_router.h"
#include "gpu_kern/moe_experts.h"

/* A failed CUDA call checked by x4_cuda_check is not left as the runtime's
 * last error, where the next launch check would report it as its own. */
static void test_error_cleared(void)
{
	x4_err e2 = { 0 };
	int rc1 = x4_cuda_check(cudaSetDevice(-1), "select device -1", &e2);
	int rc2 = x4_cuda_launched("nothing launched", &err);
	T_OK(rc1 == X4_ECUDA && rc2 == 0, "cuda_check clears the error",
	     "a bad cudaSetDevice gave %d; the next launch check gave %d (%s)", rc1, rc2,
	     rc2 ? err.msg : "");
}

int main(int argc, char **argv)
{
	t_filter(argc, argv);
	if (x4_cuda_check(cudaStreamCreate(&st), "create a stream", &err))
		die_cuda("setup");
	if (x4_config_preset("full", &full, &err)) {
		printf("FAIL preset: %s\n", err.msg);
		return 1;
	}
	struct cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	printf("# device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
	       prop.l2CacheSize >> 20);

	/* Each group by the op its FAIL lines name (t.h: OP[:CASE]), and by the
	 * first word of a check's name where that is not the op ("mla decode",
	 * "yarn omega check values", "expand_v", "argmax", "cuda_check ..."). */
	if (t_want("error_cleared", NULL) || t_want("cuda_check", NULL))
		test_error_cleared();
	if (t_want("embed", NULL))
		test_embed();
	if (t_want("rmsnorm", NULL))
		test_rmsnorm();
	if (t_want("head", NULL))
		test_head();
	if (t_want("hc", NULL))
		test_hc();
	if (t_want("rope", NULL) || t_want("yarn", NULL))
		test_rope();
	if (t_want("kv_store", NULL))
		test_kv_store();
	if (t_want("absorb", NULL) || t_want("expand_v", NULL))
		test_absorb();
	if (t_want("attention", NULL) || t_want("mla", NULL)) {
		test_mla_decode();
		test_mla_prefill();
	}
	if (t_want("sample", NULL) || t_want("argmax", NULL))
		test_sample();
	if (t_want("narrow", NULL))
		test_narrow();
	/* the products' cases each ask t_want by their own op: "op gemv",
	 * "op gemm", "op gemv2", "op gemv_swiglu" in the case text */
	test_gemv();
	test_gemm();
	if (t_want("swiglu", NULL))
		test_swiglu();
	if (t_want("moe", NULL)) {
		test_moe_router();
		test_moe_experts();
	}
	cudaStreamDestroy(st);
	return t_done();
}
