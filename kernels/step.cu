/*
 * step.cu - the batch-1 decode step as one persistent kernel (x4k_step,
 * lib/x4_kern.h section 5; docs/step.md): one block an SM, the phases of
 * docs/forward.md 4-8 separated by grid barriers, every weight streamed
 * through a warp's ring ahead of its use (step_dev.cuh), the attention's
 * small pieces folded into the prologues of the phases around them.
 *
 * A block's phases for one trunk block (MoE; a dense block's F1/F2/F3 are
 * D1/D3):
 *
 *   A1  gate finish (attention gate), x-hat; q_a, kv_a rows
 *   A2  c_q's norm; q_b rows; the cache row (one block)
 *   A3  q into xs, q's rope into q-tilde; absorb rows (W_kb)
 *   A4  attention splits over (positions, head groups)
 *   A5  combine this block's heads; expand rows (W_vb)
 *   A6  o into xs; W_o rows of this block's columns; the update (A4 of
 *       docs/forward.md 5.2) and the FFN gate's partial products there
 *   F1  gate finish (FFN gate), x-hat; router logits, shared gate/up
 *   F2  top-k; the chosen experts' gate/up
 *   F3  the downs at this block's columns, their sum, the update, the next
 *       gate's partial products (or the streams' mean for the head)
 *
 * then the head: h-hat, the Q6_K rows into the logits.  The first phase
 * is the embedding at each block's columns and the first gate's partials.
 */
#include "cuda_check.h"
#include "x4_kern.h"
#include "step_kernel.cuh"

#include <atomic>

/* ---------------- the host side ---------------- */

namespace {

using x4s::step_kernel;

/* The configurations, largest first: warps a block and ring slots a warp. */
struct Cfg {
	int nw, nslot;
	void (*k)(const x4k_step_params);
};
const Cfg cfgs[] = {
	{ 16, 3, step_kernel<16, 3> },
	{ 16, 2, step_kernel<16, 2> },
	{ 8, 3, step_kernel<8, 3> },
	{ 8, 2, step_kernel<8, 2> },
};
constexpr int NCFG = sizeof cfgs / sizeof cfgs[0];

struct Dev {
	int sms = 0, smem_optin = 0, major = 0, coop = 0;
};

int dev_of(Dev *d, x4_err *e)
{
	int dev;
	X4_CUDA_TRY(cudaGetDevice(&dev), "x4k_step: the current device", e);
	X4_CUDA_TRY(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, dev), "x4k_step: SMs", e);
	X4_CUDA_TRY(cudaDeviceGetAttribute(&d->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
		    "x4k_step: shared memory", e);
	X4_CUDA_TRY(cudaDeviceGetAttribute(&d->major, cudaDevAttrComputeCapabilityMajor, dev),
		    "x4k_step: compute capability", e);
	X4_CUDA_TRY(cudaDeviceGetAttribute(&d->coop, cudaDevAttrCooperativeLaunch, dev),
		    "x4k_step: cooperative launch", e);
	return 0;
}

size_t smem_of(const Cfg &c, const x4k_step_params *p, int G)
{
	return x4s::blk_smem(c.nw, c.nslot, p->n_hc, x4s::blk_colmax(p->D, G));
}

/* The configuration for this device and model (the first that fits, of
 * p->warps warps where asked), or NULL with the reason. */
const Cfg *pick(const Dev &d, const x4k_step_params *p, int G, x4_err *e)
{
	for (const Cfg &c : cfgs)
		if ((!p->warps || c.nw == p->warps) && smem_of(c, p, G) <= (size_t)d.smem_optin)
			return &c;
	x4_err_set(e, X4_EINVAL, "x4k_step: %zu bytes of shared memory a block needed at least%s, "
		   "the device gives %d", smem_of(cfgs[NCFG - 1], p, G),
		   p->warps ? " (of the warps asked)" : "", d.smem_optin);
	return nullptr;
}

bool fits_slot(int bytes) { return bytes + 16 <= x4s::SLOTB; }

} /* namespace */

extern "C" int x4k_step_check(const x4k_step_params *p, x4_err *e)
{
	if (!p || !p->layers || !p->token_embd || !p->output_norm || !p->output || !p->ids || !p->pos ||
	    !p->omega || !p->H || !p->cq || !p->kva || !p->q || !p->qt || !p->o || !p->h || !p->logits ||
	    !p->ws)
		return x4_err_set(e, X4_EINVAL, "x4k_step: NULL argument");
	Dev d;
	if (int rc = dev_of(&d, e))
		return rc;
	if (d.major < 8 || !d.coop)
		return x4_err_set(e, X4_EINVAL, "x4k_step: needs sm_80 or later with cooperative launch "
				  "(this device is sm_%d%s)", d.major * 10, d.coop ? "" : ", no cooperative launch");
	const int G = d.sms, D = p->D, cw = p->kv_lora + p->d_rope, dqk = p->d_nope + p->d_rope;
	const char *why = nullptr;
	const int NH = x4s::att_heads(p->n_head), HG = p->n_head / NH;
	if (G > X4K_STEP_MAX_BLOCKS)
		why = "more SMs than the step's partials hold";
	else if (p->n_hc != 4)
		why = "four residual streams";
	else if (D % 256 || D > 4096)
		why = "D a multiple of 256, at most 4096";
	else if (p->q_lora % 8 || 2 * p->q_lora > x4s::SLOTB || p->d_nope % 8 || p->kv_lora % 8 ||
		 p->d_rope % 2 || p->d_v % 8 || 2 * p->kv_lora > x4s::SLOTB || 2 * p->d_nope > x4s::SLOTB)
		why = "the attention's widths in 8s and their rows within a slot";
	else if (p->n_head * dqk > x4s::XS || p->n_head * p->d_v > x4s::XS || NH * cw > x4s::XS ||
		 HG > G || p->n_head * p->d_v % x4s::bf16_rows_a_task(p->kv_lora, p->d_v))
		why = "the attention's shape within the step's buffers";
	else if (p->n_vocab < 1)
		why = "a vocabulary";
	else if (p->n_expert > 0 && (p->n_expert > x4s::MAXE || p->k < 1 || p->k > x4s::MAXK ||
				     p->k > p->n_expert || p->F_e % 32 || p->F_sh % 32 ||
				     p->k * p->F_e + p->F_sh > x4s::XS ||
				     (p->exp_type != X4_T_IQ4_NL && p->exp_type != X4_T_Q8_0) ||
				     !fits_slot(p->F_e / 32 * (p->exp_type == X4_T_Q8_0 ? 34 : 18)) ||
				     !fits_slot(p->F_sh / 32 * 18) ||
				     !fits_slot(D / 32 * (p->exp_type == X4_T_Q8_0 ? 34 : 18))))
		why = "the MoE's shape and types (IQ4_NL or Q8_0 experts, k <= 8, widths in 32s)";
	else if (p->F_d % 32 || !fits_slot(D / 32 * 18) || !fits_slot(D / 256 * 210))
		why = "the dense FFN's and the head's rows within a slot";
	if (why)
		return x4_err_set(e, X4_EINVAL, "x4k_step: this model's shape does not fit the persistent "
				  "step: it takes %s", why);
	const Cfg *c = pick(d, p, G, e);
	if (!c)
		return X4_EINVAL;
	/* the attention's tile in the ring's memory; its threads' shares */
	const int nt = 32 * c->nw, nspl = nt / (NH * x4s::AT_T);
	const size_t tile = (((size_t)x4s::AT_T * (cw + 8) * 2 + 15) & ~(size_t)15) +
			    sizeof(float) * ((size_t)(nspl + 1) * NH * x4s::AT_T + 3 * NH);
	if (nspl < 1 || cw % (8 * nspl) || NH * p->kv_lora > 16 * nt ||
	    tile > (size_t)c->nw * c->nslot * x4s::SLOTB)
		return x4_err_set(e, X4_EINVAL, "x4k_step: the attention's shape (%d heads a block, a row "
				  "of %d) does not fit the step's tile", NH, cw);
	/* the value expansion's heads a block and their combine weights, in xs */
	const int R = x4s::bf16_rows_a_task(p->kv_lora, p->d_v), T = p->n_head * p->d_v / R;
	const int S = X4K_STEP_MAX_SPLIT < G / HG ? X4K_STEP_MAX_SPLIT : G / HG;
	for (int b = 0; b < G; b++) {
		int lo, hi;
		x4s::run_of(T, b, G, lo, hi);
		const int nb = lo < hi ? (hi * R - 1) / p->d_v - lo * R / p->d_v + 1 : 0;
		if (nb * (p->kv_lora + S + 1) > x4s::XS)
			return x4_err_set(e, X4_EINVAL, "x4k_step: %d heads' attention outputs a block on "
					  "%d SMs do not fit the step's input vector", nb, G);
	}
	return 0;
}

extern "C" int x4k_step(const x4k_step_params *p, cudaStream_t s, x4_err *e)
{
	Dev d;
	if (int rc = dev_of(&d, e))
		return rc;
	const int G = d.sms;
	const Cfg *c = pick(d, p, G, e);
	if (!c)
		return X4_EINVAL;
	const size_t smem = smem_of(*c, p, G);
	static std::atomic<unsigned long long> ready[NCFG];
	const int ci = (int)(c - cfgs);
	int dev = 0;
	cudaGetDevice(&dev);
	if (!(ready[ci].load() >> dev & 1)) {
		X4_CUDA_TRY(cudaFuncSetAttribute(c->k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
			    "x4k_step: shared memory", e);
		ready[ci].fetch_or(1ull << dev);
	}
	const x4k_step_ws w = x4k_step_ws_of(p->n_head, p->kv_lora, p->n_expert, p->k, p->F_e, p->D);
	X4_CUDA_TRY(cudaMemsetAsync(static_cast<char *>(p->ws) + w.bar, 0, sizeof(unsigned), s),
		    "x4k_step: clear the barrier", e);
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = dim3(G);
	cfg.blockDim = dim3(32 * c->nw);
	cfg.dynamicSmemBytes = smem;
	cfg.stream = s;
	cudaLaunchAttribute at[1];
	at[0].id = cudaLaunchAttributeCooperative;
	at[0].val.cooperative = 1;
	cfg.attrs = at;
	cfg.numAttrs = 1;
	X4_CUDA_TRY(cudaLaunchKernelEx(&cfg, c->k, *p), "x4k_step: launch", e);
	return 0;
}

extern "C" int x4k_step_blocks(void)
{
	Dev d;
	x4_err e = {};
	return dev_of(&d, &e) || d.major < 8 ? 0 : d.sms;
}

extern "C" int x4k_step_phases(int n_layer, int n_dense)
{
	/* the start; the barriers: the embedding's, 9 a MoE block (A1-A6,
	 * F1-F3), 8 a dense one; block 0's end (the head has no barrier) */
	return 1 + 1 + 9 * (n_layer - n_dense) + 8 * n_dense + 1;
}
