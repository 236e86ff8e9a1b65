/*
 * trunk_cuda_fwd.c - the CUDA trunk's forward pass (docs/forward.md): the
 * same function as the CPU trunk (lib/cpu/trunk_cpu_tmpl.h), in the same order,
 * with the numerics of docs/numerics.md 1: the residual streams, the
 * hyper-connection, the sublayer inputs x-hat, the SwiGLU products, the MoE
 * sum and the logits in fp32, the latent cache in fp16, the softmax fp32.
 *
 * A chunk of T tokens runs through every block on one stream; T == 1 (a
 * decode step) takes the matrix-vector and split-K attention kernels, T > 1
 * the matrix-matrix and prefill ones.  Nothing is read back inside a step
 * but the logits at its end (the MoE's route table is built on the device),
 * and the position reaches the kernels as a device int, so a step can be
 * captured into a CUDA graph as it is.
 *
 * The stream update A4/F4 is normally fused into the next gate's kernel
 * (x4k_hc_pre with y_prev); the probe and the narrow residual arms need the
 * state between the two, so they run the update on its own.
 */
#include "trunk_cuda.h"

#ifdef X4_HAVE_CUDA
#include "prof_int.h"

typedef struct fwd {
	x4_trunk_cuda *t;
	x4_cuda_ws *w;
	const x4_config *c;
	cudaStream_t s;
	int T;
	x4_err *e;
} fwd;

/* y = W x for T tokens: the matrix-vector kernel for one, else the GEMM. */
static int mm(const fwd *f, const x4_gguf_tensor *hw, const void *dw, const float *x, float *y)
{
	int n = (int)hw->ne[1], k = (int)hw->ne[0];
	if (f->T == 1)
		return x4k_gemv(hw->type, dw, n, k, x, y, f->s, f->e);
	return x4k_gemm(hw->type, dw, n, k, f->T, x, y, f->s, f->e);
}

/* The profiler's mark of the operation enqueued next (lib/prof_int.h); 0,
 * so that it sits in a chain of calls. */
static int mark(const fwd *f, int cls, const char *label, uint64_t bytes)
{
	x4_prof_op(f->t->prof, cls, label, bytes);
	return 0;
}

/* One whose two kernels read b0 and b1. */
static int mark2(const fwd *f, int cls, const char *label, uint64_t b0, uint64_t b1)
{
	x4_prof_op2(f->t->prof, cls, label, b0, b1);
	return 0;
}

/* Two products of the same x (q_a and kv_a): one launch at decode. */
static int mm2(const fwd *f, const x4_gguf_tensor *ha, const void *da, float *ya,
	       const x4_gguf_tensor *hb, const void *db, float *yb, const float *x)
{
	if (f->T == 1 && ha->type == hb->type && ha->ne[0] == hb->ne[0])
		return x4k_gemv2(ha->type, da, (int)ha->ne[1], ya, db, (int)hb->ne[1], yb,
				 (int)ha->ne[0], x, f->s, f->e);
	int rc = mm(f, ha, da, x, ya);
	return rc ? rc : mm(f, hb, db, x, yb);
}

static void swap_streams(x4_cuda_ws *w)
{
	float *tmp = w->H;
	w->H = w->Hn;
	w->Hn = tmp;
}

/* ---- the residual streams ---- */

/* The F16/BF16 arms store the streams narrowed after every update, as the
 * CPU trunk does (the failing configuration of docs/record.md 2, for
 * x4-walk-residual).  Done on the host: it is a diagnostic arm, and no
 * kernel of x4_kern.h rounds a buffer. */
/* The sublayer input x-hat handed narrow (opts.sublayer; docs/numerics.md 1.3). */
static int narrow_sub(const fwd *f)
{
	int s = f->t->o.sublayer;
	if (s == X4_SUB_F32)
		return 0;
	return x4k_narrow((int64_t)f->T * f->c->n_embd, f->w->xh,
			  s == X4_SUB_F16 ? X4K_NARROW_F16 : X4K_NARROW_BF16, f->s, f->e);
}

static int narrow(const fwd *f)
{
	x4_trunk_cuda *t = f->t;
	if (t->o.resid == X4_RESID_F32)
		return 0;
	size_t n = (size_t)f->T * (size_t)f->c->n_hc * (size_t)f->c->n_embd;
	float *h = t->narrow_host;
	X4_CUDA_TRY(cudaMemcpyAsync(h, f->w->H, n * sizeof *h, cudaMemcpyDeviceToHost, f->s),
		    "read the residual back to narrow it", f->e);
	X4_CUDA_TRY(cudaStreamSynchronize(f->s), "read the residual back to narrow it", f->e);
	for (size_t i = 0; i < n; i++)
		h[i] = t->o.resid == X4_RESID_F16 ? x4_f16_to_f32(x4_f32_to_f16(h[i]))
						  : x4_bf16_to_f32(x4_f32_to_bf16(h[i]));
	X4_CUDA_TRY(cudaMemcpyAsync(f->w->H, h, n * sizeof *h, cudaMemcpyHostToDevice, f->s),
		    "write the narrowed residual", f->e);
	/* The next narrow reuses h: let this copy finish with it first. */
	X4_CUDA_TRY(cudaStreamSynchronize(f->s), "write the narrowed residual", f->e);
	return 0;
}

/* The last gate's coefficients, which may still be forming on the side
 * stream, before anything reads them. */
static int join_side(const fwd *f)
{
	x4_trunk_cuda *t = f->t;
	if (!t->side_live)
		return 0;
	t->side_live = false;
	X4_CUDA_TRY(cudaStreamWaitEvent(f->s, t->side.done, 0), "join the gate's side stream", f->e);
	return 0;
}

/* docs/forward.md 5.1 for one sublayer's gate: coef and the collapse x from
 * the streams, then the sublayer's RMSNorm (gain) of x into xh, in the gate's
 * kernel at decode sizes.  pend (not NULL) is the previous sublayer's
 * coefficients, whose update A4/F4 with y is applied first, in the same
 * kernel. */
static int gate(const fwd *f, const void *fn, const void *base, const void *scale,
		const float *pend, float *coef, const float *gain)
{
	x4_trunk_cuda *t = f->t;
	x4_cuda_ws *w = f->w;
	/* the coefficients' Sinkhorn on the side stream, joined where the next
	 * gate (or an update) reads them: 1.043x of the step at 512 tokens of
	 * context, 1.037x at 4,096 (bench/RESULTS.md 36) */
	int rc = pend ? join_side(f) : 0;
	if (!rc)
		rc = x4k_hc_pre_norm(&t->hc, f->T, w->H, fn, base, scale, pend ? w->y : NULL, pend,
				     pend ? w->Hn : NULL, w->x, coef, gain, f->c->rms_eps, w->xh,
				     t->o.hc_eager, w->hc_ws, w->hc_ws_bytes, &t->side, f->s, f->e);
	if (!rc)
		t->side_live = true;
	if (!rc && pend)
		swap_streams(w);
	return rc;
}

/* docs/forward.md 5.2 A4/F4 on its own, then the residual's width. */
static int update(const fwd *f, const float *coef)
{
	x4_cuda_ws *w = f->w;
	int rc = join_side(f);
	if (rc)
		return rc;
	mark(f, X4_PC_HC, "hc_update", 0);
	rc = x4k_hc_post(&f->t->hc, f->T, coef, w->y, w->H, w->Hn, f->s, f->e);
	if (rc)
		return rc;
	swap_streams(w);
	return narrow(f);
}

/* The last token's state after sublayer `sub` of block b, to the probe. */
static int probe(const fwd *f, int b, int sub, const float *coef, const x4k_moe_routes *r)
{
	int rc = join_side(f);
	if (rc)
		return rc;
	x4_trunk_cuda *t = f->t;
	x4_cuda_ws *w = f->w;
	const x4_config *c = f->c;
	size_t D = (size_t)c->n_embd, hc = (size_t)c->n_hc, last = (size_t)f->T - 1;
	size_t k = (size_t)c->n_expert_used;
	struct { void *dst; const void *src; size_t n; } cp[] = {
		{ t->pr_streams, w->H + last * hc * D, hc * D * sizeof(float) },
		{ t->pr_y, w->y + last * D, D * sizeof(float) },
		{ t->pr_xh, w->xh + last * D, D * sizeof(float) },
		{ t->pr_coef, coef + last * (size_t)t->ncoef, (size_t)t->ncoef * sizeof(float) },
		{ t->pr_sel, r ? (const void *)(r->sel + last * k) : NULL, k * sizeof(int32_t) },
		{ t->pr_wts, r ? (const void *)(r->wts + last * k) : NULL, k * sizeof(float) },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(cp); i++)
		if (cp[i].src)
			X4_CUDA_TRY(cudaMemcpyAsync(cp[i].dst, cp[i].src, cp[i].n,
						    cudaMemcpyDeviceToHost, f->s),
				    "read the probe's values back", f->e);
	X4_CUDA_TRY(cudaStreamSynchronize(f->s), "read the probe's values back", f->e);
	x4_probe_row row = {
		.block = b, .sublayer = sub, .streams = t->pr_streams, .sub_out = t->pr_y,
		.sub_in = t->pr_xh, .post = t->pr_coef + hc, .comb = t->pr_coef + 2 * hc,
		.experts = r ? t->pr_sel : NULL, .expert_w = r ? t->pr_wts : NULL,
	};
	t->probe(t->probe_ctx, &row);
	return 0;
}

/* ---- sublayers ---- */

/* docs/forward.md 6, absorbed: y = MLA(x-hat), the chunk's cache rows stored first. */
static int mla(const fwd *f, int b)
{
	x4_trunk_cuda *t = f->t;
	x4_cuda_ws *w = f->w;
	const x4_config *c = f->c;
	const x4_block_w *hw = &t->m->blk[b];
	const x4_block_dev *d = &t->blk[b];
	int T = f->T, nh = c->n_head, kvl = c->kv_lora, dr = c->d_rope, cw = t->cw;
	uint16_t *cache = t->cache + (size_t)b * (size_t)t->max_ctx * (size_t)cw;
	float eps = c->rms_eps;
	int rc;
	if ((rc = mark(f, X4_PC_ATTN, "attn_q_a_kv_a",
		       hw->attn_q_a->nbytes + hw->attn_kv_a_mqa->nbytes)) ||
	    (rc = mm2(f, hw->attn_q_a, d->attn_q_a, w->cq, hw->attn_kv_a_mqa, d->attn_kv_a_mqa,
		      w->kva, w->xh)) ||
	    (rc = mark(f, X4_PC_ATTN, "attn_kv_store_q_norm",
		       hw->attn_kv_a_norm->nbytes + hw->attn_q_a_norm->nbytes)) ||
	    (rc = x4k_kv_store_norm(T, kvl, dr, w->kva, d->attn_kv_a_norm, eps, w->omega, w->pos,
				    cache, t->max_ctx, c->q_lora, w->cq, d->attn_q_a_norm, f->s,
				    f->e)) ||
	    (rc = mark(f, X4_PC_ATTN, "attn_q_b", hw->attn_q_b->nbytes)) ||
	    (rc = mm(f, hw->attn_q_b, d->attn_q_b, w->cq, w->q)) ||
	    (rc = mark(f, X4_PC_ATTN, "attn_absorb_q_rope", hw->attn_k_b->nbytes)) ||
	    (rc = x4k_mla_absorb_q_rope(T, nh, kvl, c->d_nope, dr, d->attn_k_b, w->q, w->qt,
					w->omega, w->pos, f->s, f->e)))
		return rc;
	/* The cache rows [0, chunk position + T) of this layer, fp16. */
	x4_prof_op_cache(t->prof, X4_PC_ATTN, T == 1 ? "attn_decode" : "attn_prefill",
			 (uint64_t)cw * sizeof(uint16_t), *t->pos_host + T);
	if (T == 1) /* the option's kernel (x4_trunk_opts.attn); both take the same workspace */
		rc = (t->o.attn == X4_ATTN_MMA ? x4k_mla_decode_mma : x4k_mla_decode)(
			nh, kvl, dr, w->qt, cache, t->max_ctx, w->pos, c->kq_scale, w->ob, w->att_ws,
			w->att_ws_bytes, f->s, f->e);
	else /* likewise; neither takes a workspace */
		rc = (t->o.attn == X4_ATTN_MMA ? x4k_mla_prefill_mma : x4k_mla_prefill)(
			T, nh, kvl, dr, w->qt, cache, t->max_ctx, w->pos, c->kq_scale, w->ob, f->s,
			f->e);
	if (rc || (rc = mark(f, X4_PC_ATTN, "attn_expand_v", hw->attn_v_b->nbytes)) ||
	    (rc = x4k_mla_expand_v(T, nh, kvl, c->d_v, d->attn_v_b, w->ob, w->o, f->s, f->e)))
		return rc;
	mark(f, X4_PC_ATTN, "attn_output", hw->attn_output->nbytes);
	return mm(f, hw->attn_output, d->attn_output, w->o, w->y);
}

/* down(silu(gate x) * up x), the product fp32 (docs/numerics.md 1.4), into out; cls
 * is the profiler's class (dense FFN or shared expert).  hd NULL: only the
 * product, left in w->h. */
static int swiglu_ffn(const fwd *f, int cls, const x4_gguf_tensor *hg, const void *dg,
		      const x4_gguf_tensor *hu, const void *du, const x4_gguf_tensor *hd,
		      const void *dd, float *out)
{
	x4_cuda_ws *w = f->w;
	int rc;
	bool one = f->T == 1 && hg->type == hu->type && hg->ne[0] == hu->ne[0] &&
		   hg->ne[1] == hu->ne[1];
	if (one) {
		mark(f, cls, "ffn_gate_up_swiglu", hg->nbytes + hu->nbytes);
		rc = x4k_gemv_swiglu(hg->type, dg, du, (int)hg->ne[1], (int)hg->ne[0], w->xh, w->g,
				     w->u, w->h, f->s, f->e);
	} else if (!(rc = mark(f, cls, "ffn_gate", hg->nbytes)) &&
		   !(rc = mm(f, hg, dg, w->xh, w->g)) &&
		   !(rc = mark(f, cls, "ffn_up", hu->nbytes)) &&
		   !(rc = mm(f, hu, du, w->xh, w->u)) && !(rc = mark(f, cls, "ffn_swiglu", 0))) {
		rc = x4k_swiglu((int64_t)f->T * (int64_t)hg->ne[1], w->g, w->u, w->h, f->s, f->e);
	}
	if (rc || !hd)
		return rc;
	mark(f, cls, "ffn_down", hd->nbytes);
	return mm(f, hd, dd, w->h, out);
}

/* docs/forward.md 7.2, 7.3: the router, the route table, the grouped experts and the
 * shared expert, summed in ascending expert id; r receives the routes. */
static int moe(const fwd *f, int b, x4k_moe_routes *r)
{
	x4_trunk_cuda *t = f->t;
	x4_cuda_ws *w = f->w;
	const x4_config *c = f->c;
	const x4_block_w *hw = &t->m->blk[b];
	const x4_block_dev *d = &t->blk[b];
	int k = c->n_expert_used, T = f->T;
	int rc = x4k_moe_routes_init(r, w->routes_ws, w->routes_ws_bytes, T, k, c->n_expert,
				     x4k_moe_tile(T, k), f->e);
	const float *out = NULL;
	/* A decode step's token reads k experts' rows of each tensor; which
	 * experts a chunk's routes touch is known on the device only. */
	uint64_t gu = X4_PROF_UNKNOWN, dn = X4_PROF_UNKNOWN;
	if (T == 1 && t->prof) {
		uint64_t E = (uint64_t)c->n_expert, kk = (uint64_t)k;
		gu = (hw->ffn_gate_exps->nbytes + hw->ffn_up_exps->nbytes) / E * kk;
		dn = hw->ffn_down_exps->nbytes / E * kk;
	}
	bool sh = hw->ffn_gate_shexp != NULL;
	/* the batch-1 step selects inside the experts' first launch
	 * (x4k_moe_experts_sum's pick), the router its logits alone: one
	 * launch fewer a layer, the step 1.023x faster at 512 tokens of
	 * context and 1.028x at 4,096 (bench/RESULTS.md 37) */
	const bool pick = T == 1 && sh;
	const x4k_moe_pick pk = { d->exp_probs_b, c->expert_scale, c->expert_norm };
	if (rc || (rc = mark2(f, X4_PC_ROUTER, "moe_router", hw->ffn_gate_inp->nbytes,
			      hw->exp_probs_b->nbytes)))
		return rc;
	rc = pick ? x4k_moe_router_logits(r, w->xh, c->n_embd, d->ffn_gate_inp, f->s, f->e)
		  : x4k_moe_router_table(r, w->xh, c->n_embd, d->ffn_gate_inp, d->exp_probs_b,
					 c->expert_scale, c->expert_norm, f->s, f->e);
	if (rc)
		return rc;
	if (pick) {
		/* the batch-1 step in two launches (x4k_moe_experts_sum): the
		 * experts' gate and up with the shared expert's (the step 1.011x
		 * faster than with its own launch before them at 512 tokens of
		 * context, 1.003x at 4,096: bench/RESULTS.md 36), then both downs
		 * and the sum; a shared expert of another type or width than the
		 * experts takes its own product first */
		const x4_gguf_tensor *sg = hw->ffn_gate_shexp, *su = hw->ffn_up_shexp;
		const x4_gguf_tensor *sd = hw->ffn_down_shexp;
		const uint64_t dd = (uint64_t)c->n_embd, ff = (uint64_t)c->n_ff_exp;
		bool inside = sg->type == sd->type && su->type == sd->type && sg->ne[0] == dd &&
			      sg->ne[1] == ff && su->ne[0] == dd && su->ne[1] == ff;
		if (!inside && (rc = swiglu_ffn(f, X4_PC_SHARED, sg, d->ffn_gate_shexp, su,
						d->ffn_up_shexp, NULL, NULL, NULL)))
			return rc;
		if (inside && gu != X4_PROF_UNKNOWN)
			gu += sg->nbytes + su->nbytes;
		mark2(f, X4_PC_EXPERTS, "moe_experts_sum", gu,
		      dn == X4_PROF_UNKNOWN ? dn : dn + sd->nbytes);
		return x4k_moe_experts_sum(r, &pk, hw->ffn_gate_exps->type, w->xh, c->n_embd,
					   c->n_ff_exp, d->ffn_gate_exps, d->ffn_up_exps,
					   d->ffn_down_exps, sd->type, inside ? d->ffn_gate_shexp : NULL,
					   inside ? d->ffn_up_shexp : NULL, d->ffn_down_shexp, w->h,
					   w->exp_ws, w->exp_ws_bytes, w->y, f->s, f->e);
	}
	if ((rc = mark2(f, X4_PC_EXPERTS, "moe_experts", gu, dn)) ||
	    (rc = x4k_moe_experts(r, hw->ffn_gate_exps->type, w->xh, c->n_embd, c->n_ff_exp,
				  d->ffn_gate_exps, d->ffn_up_exps, d->ffn_down_exps, w->exp_ws,
				  w->exp_ws_bytes, &out, f->s, f->e)))
		return rc;
	if (sh && (rc = swiglu_ffn(f, X4_PC_SHARED, hw->ffn_gate_shexp, d->ffn_gate_shexp,
				   hw->ffn_up_shexp, d->ffn_up_shexp, hw->ffn_down_shexp,
				   d->ffn_down_shexp, w->shared)))
		return rc;
	mark(f, X4_PC_EXPERTS, "moe_reduce", 0);
	return x4k_moe_reduce(r, out, sh ? w->shared : NULL, c->n_embd, w->y, f->s, f->e);
}

/* ---- one chunk ---- */

static int blocks(const fwd *f, bool observe)
{
	x4_trunk_cuda *t = f->t;
	x4_cuda_ws *w = f->w;
	const x4_config *c = f->c;
	bool fused = !observe && t->o.resid == X4_RESID_F32;
	const float *pend = NULL; /* coefficients whose update with y is pending */
	int rc;
	t->side_live = false; /* (a failed forward may have left it set) */
	for (int b = 0; b < c->n_block; b++) {
		const x4_block_w *hw = &t->m->blk[b];
		const x4_block_dev *d = &t->blk[b];
		if ((rc = mark(f, X4_PC_HC, "hc_attn_gate_norm",
			       hw->hc_attn_fn->nbytes + hw->attn_norm->nbytes)) ||
		    (rc = gate(f, d->hc_attn_fn, d->hc_attn_base, d->hc_attn_scale, pend, w->coef_a,
			       d->attn_norm)) ||
		    (rc = narrow_sub(f)) || (rc = mla(f, b)))
			return rc;
		pend = w->coef_a;
		if (!fused) {
			if ((rc = update(f, pend)) || (observe && (rc = probe(f, b, 0, pend, NULL))))
				return rc;
			pend = NULL;
		}
		if ((rc = mark(f, X4_PC_HC, "hc_ffn_gate_norm",
			       hw->hc_ffn_fn->nbytes + hw->ffn_norm->nbytes)) ||
		    (rc = gate(f, d->hc_ffn_fn, d->hc_ffn_base, d->hc_ffn_scale, pend, w->coef_f,
			       d->ffn_norm)) || (rc = narrow_sub(f)))
			return rc;
		x4k_moe_routes r;
		if (hw->moe)
			rc = moe(f, b, &r);
		else
			rc = swiglu_ffn(f, X4_PC_DENSE, hw->ffn_gate, d->ffn_gate, hw->ffn_up,
					d->ffn_up, hw->ffn_down, d->ffn_down, w->y);
		if (rc)
			return rc;
		pend = w->coef_f;
		if (!fused) {
			if ((rc = update(f, pend)) ||
			    (observe && (rc = probe(f, b, 1, pend, hw->moe ? &r : NULL))))
				return rc;
			pend = NULL;
		}
	}
	return pend ? update(f, pend) : 0;
}

/* docs/forward.md 8 for n tokens of the streams from token tk0: logits into
 * w->logits, then to the host unless logits is NULL (the device pick). */
static int head(fwd *f, int tk0, int n, float *logits)
{
	x4_trunk_cuda *t = f->t;
	x4_cuda_ws *w = f->w;
	const x4_config *c = f->c;
	const float *H = w->H + (size_t)tk0 * (size_t)c->n_hc * (size_t)c->n_embd;
	mark(f, X4_PC_HEAD, "head_norm", t->m->output_norm->nbytes);
	int rc = x4k_head(n, c->n_hc, c->n_embd, H, t->output_norm, c->rms_eps, w->hn, f->s, f->e);
	if (rc)
		return rc;
	int T = f->T;
	f->T = n;
	mark(f, X4_PC_HEAD, "head_logits", t->m->output->nbytes);
	rc = mm(f, t->m->output, t->output, w->hn, w->logits);
	f->T = T;
	if (rc || !logits)
		return rc;
	X4_CUDA_TRY(cudaMemcpyAsync(logits, w->logits, sizeof(float) * (size_t)n * c->n_vocab,
				    cudaMemcpyDeviceToHost, f->s),
		    "copy the logits to the host", f->e);
	return 0;
}

/* The device pick (argmax or the sampler) on one row of logits (row: the
 * device row, w.logits when the head ran for one token), and its copy to
 * the pinned next_host. */
static int pick_next(x4_trunk_cuda *t, const float *row, const x4_sampler_opts *so,
		     int32_t *pick, x4_err *e)
{
	const x4_config *c = t->c;
	void *ws = t->samp;
	uint64_t *step = (uint64_t *)((char *)t->samp + t->samp_ws_bytes + 16);
	int rc;
	x4_prof_op(t->prof, X4_PC_HEAD, "pick", 0);
	if (so->temperature > 0 && so->top_k != 1)
		rc = x4k_sample(c->n_vocab, row, so->temperature, so->top_k, so->top_p,
				so->seed, step, pick, ws, t->samp_ws_bytes, t->s, e);
	else
		rc = x4k_argmax(c->n_vocab, row, pick, ws, t->samp_ws_bytes, t->s, e);
	if (!rc)
		rc = x4_cuda_check(cudaMemcpyAsync(t->next_host, pick, sizeof(int32_t),
						   cudaMemcpyDeviceToHost, t->s),
				   "copy the next token id to the host", e);
	return rc;
}

/* One decode step with the device pick, everything on t->s and nothing
 * synchronised: what the graph captures.  The id and the position are read
 * from the pinned staging at run (or replay) time. */
static int enqueue_step(x4_trunk_cuda *t, const x4_sampler_opts *so, int32_t *pick, x4_err *e)
{
	const x4_config *c = t->c;
	fwd f = { t, &t->w, c, t->s, 1, e };
	X4_CUDA_TRY(cudaMemcpyAsync(t->w.ids, t->ids_host, sizeof(int32_t), cudaMemcpyHostToDevice,
				    t->s), "upload the token id", e);
	X4_CUDA_TRY(cudaMemcpyAsync(t->w.pos, t->pos_host, sizeof(int), cudaMemcpyHostToDevice,
				    t->s), "upload the position", e);
	x4_prof_op(t->prof, X4_PC_EMBED, "embed", t->m->token_embd->nbytes / (uint64_t)c->n_vocab);
	int rc = x4k_embed(t->token_embd, c->n_vocab, c->n_embd, c->n_hc, t->w.ids, 1, t->w.H,
			   t->s, e);
	if (!rc)
		rc = blocks(&f, false);
	if (!rc)
		rc = head(&f, 0, 1, NULL);
	if (!rc)
		rc = pick_next(t, t->w.logits, so, pick, e);
	return rc;
}

/* The decode step's graph can serve this trunk (else its steps run eagerly:
 * the same arithmetic). */
static bool graph_usable(const x4_trunk_cuda *t)
{
	return !(t->o.no_graph || t->graph_failed || t->probe || t->o.resid != X4_RESID_F32);
}

/* The decode step's graph for sampler options so, captured (nothing runs)
 * unless the one held was captured for them.  Capturing is host work only:
 * run() does it while the GPU runs a prompt's last chunk.  Returns 1 when
 * the capture is refused (graph_failed is then set). */
static int capture_step(x4_trunk_cuda *t, const x4_sampler_opts *so, int32_t *pick)
{
	if (t->step_graph && !memcmp(&t->graph_so, so, sizeof *so))
		return 0;
	if (t->step_graph)
		cudaGraphExecDestroy(t->step_graph);
	t->step_graph = NULL;
	cudaGraph_t g = NULL;
	cudaError_t st = cudaStreamBeginCapture(t->s, cudaStreamCaptureModeThreadLocal);
	x4_err ce = { 0 };
	int rc = st == cudaSuccess ? enqueue_step(t, so, pick, &ce) : 1;
	if (st == cudaSuccess)
		st = cudaStreamEndCapture(t->s, &g);
	if (!rc && st == cudaSuccess)
		st = cudaGraphInstantiate(&t->step_graph, g, 0);
	if (!rc && st == cudaSuccess)
		x4_prof_graph(t->prof, g); /* the trunk's count of the step's kernels */
	if (g)
		cudaGraphDestroy(g);
	cudaGetLastError(); /* a refused capture is not the next launch's error */
	if (rc || st != cudaSuccess) {
		t->step_graph = NULL;
		t->graph_failed = true; /* the eager step is the same arithmetic */
		return 1;
	}
	t->graph_so = *so;
	return 0;
}

/* A decode step replayed from the graph (docs/record.md 6: the step's
 * launches, not its bytes, were the cost), captured here on first use
 * where the prompt's prefill did not already.  Returns 1 when the graph
 * cannot serve (the caller runs the step eagerly). */
static int graph_step(x4_trunk_cuda *t, int32_t id, const x4_sampler_opts *so, int32_t *pick,
		      x4_err *e)
{
	/* The staging first: a capture marks the attention's cache bytes for
	 * the profiler from this step's position (a stale one, the prompt's
	 * last chunk's, gave every replay a few rows of cache) */
	t->ids_host[0] = id;
	*t->pos_host = t->pos;
	if (!graph_usable(t) || capture_step(t, so, pick))
		return 1;
	X4_CUDA_TRY(cudaGraphLaunch(t->step_graph, t->s), "replay the decode step's graph", e);
	X4_CUDA_TRY(cudaStreamSynchronize(t->s), "run the decode step on the GPU", e);
	t->pos += 1;
	return 0;
}

/* The forward pass; with pick set, the last row's logits stay on the device
 * and *pick (a device int) receives the next token chosen by so. */
static int run(x4_trunk_cuda *t, const int32_t *ids, int n, float *logits, bool all_logits,
	       const x4_sampler_opts *so, int32_t *pick, x4_err *e)
{
	const x4_config *c = t->c;
	/* The arguments were checked by lib/run/trunk.c. */
	if (t->broken)
		return x4_err_set(e, X4_ENOMEM, "the trunk has no cache since a failed change of "
				  "options; configure it again with options that fit");
	const float *pick_row = t->w.logits; /* where the last position's logits land */
	X4_CUDA_TRY(cudaSetDevice(t->dev), "select the CUDA device", e);
	x4k_pdl_set(t->o.pdl); /* process-wide: a trunk sets its own before it launches */
	x4k_gemm_mma_set(t->o.gemm == X4_GEMM_MMA); /* likewise */
	x4k_tc_copy_set(!t->o.warp_copy);          /* likewise */
	fwd f = { t, &t->w, c, t->s, 0, e };
	int rc = 0;
	for (int done = 0; done < n && !rc; done += t->chunk) {
		int T = X4_MIN(t->chunk, n - done);
		bool last = done + T == n;
		f.T = T;
		/* The pinned staging is reused: the previous chunk's copies must
		 * have read it (a decode step is one chunk and never waits here). */
		if (done)
			X4_CUDA_TRY(cudaStreamSynchronize(t->s), "run a prefill chunk", e);
		memcpy(t->ids_host, ids + done, sizeof(int32_t) * (size_t)T);
		*t->pos_host = t->pos + done;
		X4_CUDA_TRY(cudaMemcpyAsync(t->w.ids, t->ids_host, sizeof(int32_t) * (size_t)T,
					    cudaMemcpyHostToDevice, t->s), "upload the token ids", e);
		X4_CUDA_TRY(cudaMemcpyAsync(t->w.pos, t->pos_host, sizeof(int),
					    cudaMemcpyHostToDevice, t->s), "upload the position", e);
		x4_prof_op(t->prof, X4_PC_EMBED, "embed",
			   t->m->token_embd->nbytes / (uint64_t)c->n_vocab * (uint64_t)T);
		rc = x4k_embed(t->token_embd, c->n_vocab, c->n_embd, c->n_hc, t->w.ids, T, t->w.H,
			       t->s, e);
		if (!rc)
			rc = narrow(&f);
		if (!rc)
			rc = blocks(&f, last && t->probe);
		if (!rc && logits && all_logits) {
			rc = head(&f, 0, T, logits + (size_t)done * (size_t)c->n_vocab);
			pick_row = t->w.logits + (size_t)(T - 1) * (size_t)c->n_vocab;
		}
		else if (!rc && logits && last)
			rc = head(&f, T - 1, 1, logits);
		else if (!rc && pick && last)
			rc = head(&f, T - 1, 1, NULL);
	}
	if (!rc && pick)
		rc = pick_next(t, pick_row, so, pick, e);
	/* A prompt that picks its first token will decode next: its step's graph
	 * is captured now, on the host while the GPU runs the last chunk, so that
	 * the first decode step is a replay (not under the profiler, whose marks
	 * would be the prefill's). */
	if (!rc && pick && n > 1 && !t->prof && graph_usable(t))
		(void)capture_step(t, so, pick);
	/* Every kernel's own failure surfaces here, named. */
	cudaError_t st = cudaStreamSynchronize(t->s);
	if (rc)
		return rc;
	X4_CUDA_TRY(st, "run the forward pass on the GPU", e);
	t->pos += n;
	return 0;
}

int x4_trunk_cuda_forward(x4_trunk_cuda *t, const int32_t *ids, int n, float *logits,
			  bool all_logits, x4_err *e)
{
	return run(t, ids, n, logits, all_logits, NULL, NULL, e);
}

/* The device pick's buffers, all or none: a half-made set would fail every
 * later step (the next id copied to a NULL host buffer). */
static int samp_alloc(x4_trunk_cuda *t, x4_err *e)
{
	/* [workspace | the picked id (16 B) | the sampler's step counter] */
	t->samp_ws_bytes = (x4k_sample_workspace_bytes(t->c->n_vocab) + 15) & ~(size_t)15;
	size_t bytes = t->samp_ws_bytes + 16 + sizeof(uint64_t);
	int rc = x4_cuda_check(cudaSetDevice(t->dev), "select the CUDA device", e);
	if (!rc)
		rc = x4_dev_alloc(&t->samp, bytes, "the device sampler", e);
	if (!rc)
		rc = x4_cuda_check(cudaMemset(t->samp, 0, bytes), "clear the device sampler", e);
	if (!rc)
		rc = x4_cuda_check(cudaMallocHost((void **)&t->next_host, sizeof(int32_t)),
				   "allocate pinned memory for the next token id", e);
	if (rc) {
		x4_dev_free(t->samp);
		t->samp = NULL;
		if (t->next_host)
			cudaFreeHost(t->next_host);
		t->next_host = NULL;
	}
	return rc;
}

int x4_trunk_cuda_forward_next(x4_trunk_cuda *t, const int32_t *ids, int n,
			       const x4_sampler_opts *so, int32_t *next, float *logit,
			       float *logits, x4_err *e)
{
	if (!t->samp) {
		int rc = samp_alloc(t, e);
		if (rc)
			return rc;
	}
	int32_t *pick = (int32_t *)((char *)t->samp + t->samp_ws_bytes);
	int rc = 1;
	/* With every row asked for, the step runs eagerly (the graph keeps the
	 * logits on the device); the arithmetic and the pick are the same. */
	if (n == 1 && !logits && !t->broken) {
		X4_CUDA_TRY(cudaSetDevice(t->dev), "select the CUDA device", e);
		x4k_pdl_set(t->o.pdl);
		rc = graph_step(t, ids[0], so, pick, e);
		if (rc < 0)
			return rc;
	}
	if (rc)
		rc = run(t, ids, n, logits, logits != NULL, so, pick, e);
	if (rc)
		return rc;
	*next = *t->next_host; /* run() synchronised the stream */
	/* The picked token's logit, so that a row that is not finite
	 * (the overflow of docs/numerics.md 2) is an error and not a silent token 0.  One more
	 * 4-byte copy a step; a graphed step would fold it into the pick. */
	const x4_config *c = t->c;
	if (logits) {
		*logit = logits[(size_t)(n - 1) * (size_t)c->n_vocab + (size_t)*next];
		return 0;
	}
	X4_CUDA_TRY(cudaMemcpy(logit, t->w.logits + *next, sizeof(float), cudaMemcpyDeviceToHost),
		    "copy the picked token's logit to the host", e);
	return 0;
}

#else
/* A build without CUDA: lib/cuda/trunk_cuda.c has the refusing entry points. */
typedef int x4_trunk_cuda_fwd_unused;
#endif
