/*
 * step_host.c - the persistent decode step's parameters (x4k_step,
 * lib/x4_kern.h section 5) from a trunk's bindings: one definition for the
 * CUDA trunk (device pointers, lib/cuda/trunk_cuda.c) and the CPU emulator
 * of the step (host pointers, bench/emu/emu_step.cc).
 */
#include "trunk_cuda.h"

/* (the layers and the parameters need the CUDA trunk's types; the phase
 * list and the step's bytes are the model's alone, in every build) */
#ifdef X4_HAVE_CUDA

void x4_step_layers(const x4_config *c, const x4_block_w *hw, const x4_block_dev *d,
		    uint16_t *cache, int max_ctx, x4k_step_layer *out)
{
	const size_t cw = (size_t)(c->kv_lora + c->d_rope);
	for (int b = 0; b < c->n_block; b++) {
		const x4_block_dev *s = &d[b];
		x4k_step_layer *L = &out[b];
		memset(L, 0, sizeof *L);
		L->hc_fn[0] = s->hc_attn_fn;
		L->hc_fn[1] = s->hc_ffn_fn;
		L->hc_base[0] = s->hc_attn_base;
		L->hc_base[1] = s->hc_ffn_base;
		L->hc_scale[0] = s->hc_attn_scale;
		L->hc_scale[1] = s->hc_ffn_scale;
		L->norm[0] = s->attn_norm;
		L->norm[1] = s->ffn_norm;
		L->q_a = s->attn_q_a;
		L->q_b = s->attn_q_b;
		L->kv_a = s->attn_kv_a_mqa;
		L->k_b = s->attn_k_b;
		L->v_b = s->attn_v_b;
		L->o = s->attn_output;
		L->q_a_norm = s->attn_q_a_norm;
		L->kv_a_norm = s->attn_kv_a_norm;
		if (hw[b].moe) {
			L->router = s->ffn_gate_inp;
			L->router_bias = s->exp_probs_b;
			L->gate_exps = s->ffn_gate_exps;
			L->up_exps = s->ffn_up_exps;
			L->down_exps = s->ffn_down_exps;
			L->gate_sh = s->ffn_gate_shexp;
			L->up_sh = s->ffn_up_shexp;
			L->down_sh = s->ffn_down_shexp;
		} else {
			L->gate = s->ffn_gate;
			L->up = s->ffn_up;
			L->down = s->ffn_down;
		}
		L->cache = cache + (size_t)b * (size_t)max_ctx * cw;
	}
}

void x4_step_params(const x4_config *c, const x4_block_w *hw, const x4k_step_layer *layers,
		    const void *token_embd, const void *output_norm, const void *output, int max_ctx,
		    const x4_cuda_ws *w, x4k_step_params *p)
{
	memset(p, 0, sizeof *p);
	p->D = c->n_embd;
	p->n_hc = c->n_hc;
	p->n_layer = c->n_block;
	p->q_lora = c->q_lora;
	p->kv_lora = c->kv_lora;
	p->d_nope = c->d_nope;
	p->d_rope = c->d_rope;
	p->n_head = c->n_head;
	p->d_v = c->d_v;
	p->n_vocab = c->n_vocab;
	p->F_d = c->n_ff;
	p->n_expert = c->n_expert;
	p->k = c->n_expert_used;
	p->F_e = c->n_ff_exp;
	p->F_sh = c->n_ff_exp * c->n_expert_shared;
	p->max_ctx = max_ctx;
	p->exp_type = X4_T_IQ4_NL;
	for (int b = 0; b < c->n_block; b++)
		if (hw[b].moe && hw[b].ffn_gate_exps) {
			p->exp_type = hw[b].ffn_gate_exps->type;
			break;
		}
	p->expert_norm = c->expert_norm;
	p->eps = c->rms_eps;
	p->kq_scale = c->kq_scale;
	p->expert_scale = c->expert_scale;
	p->hc = (x4k_hc_cfg){ c->n_hc, c->n_embd, c->sinkhorn_iters, c->rms_eps, c->hc_eps,
			      c->clamp_min, c->clamp_max };
	p->layers = layers;
	p->token_embd = token_embd;
	p->output_norm = output_norm;
	p->output = output;
	p->ids = w->ids;
	p->pos = w->pos;
	p->omega = w->omega;
	p->H = w->H;
	p->cq = w->cq;
	p->kva = w->kva;
	p->q = w->q;
	p->qt = w->qt;
	p->o = w->o;
	p->h = w->h;
	p->logits = w->logits;
	p->ws = w->step_ws;
	p->clock = NULL;
}

#endif

static uint64_t nb(const x4_gguf_tensor *t) { return t ? t->nbytes : 0; }

int x4_step_phase_list(const x4_model *m, int ctx, x4_step_phase *ph, int max)
{
	const x4_config *c = &m->c;
	int n = 0;
#define PUT(l, nm, b)                                                       \
	do {                                                                \
		if (n < max)                                                \
			ph[n] = (x4_step_phase){ (l), (nm), (uint64_t)(b) }; \
		n++;                                                        \
	} while (0)
	const uint64_t E = (uint64_t)X4_MAX(1, c->n_expert), k = (uint64_t)c->n_expert_used;
	const uint64_t cw = (uint64_t)(c->kv_lora + c->d_rope);
	PUT(-1, "embed", nb(m->token_embd) / (uint64_t)X4_MAX(1, c->n_vocab) + nb(m->blk[0].hc_attn_fn));
	for (int b = 0; b < c->n_block; b++) {
		const x4_block_w *w = &m->blk[b];
		const uint64_t next = b + 1 < c->n_block ? nb(m->blk[b + 1].hc_attn_fn) : 0;
		PUT(b, "attn_qa_kva", nb(w->attn_q_a) + nb(w->attn_kv_a_mqa) + nb(w->attn_norm) +
				      nb(w->hc_attn_base) + nb(w->hc_attn_scale));
		PUT(b, "attn_qb", nb(w->attn_q_b) + nb(w->attn_q_a_norm) + nb(w->attn_kv_a_norm));
		PUT(b, "attn_absorb", nb(w->attn_k_b));
		PUT(b, "attn_cache", (uint64_t)ctx * cw * 2);
		PUT(b, "attn_expand", nb(w->attn_v_b));
		PUT(b, "attn_out_update", nb(w->attn_output) + nb(w->hc_ffn_fn));
		if (w->moe) {
			PUT(b, "moe_router_shared", nb(w->ffn_gate_inp) + nb(w->exp_probs_b) +
						    nb(w->ffn_gate_shexp) + nb(w->ffn_up_shexp) +
						    nb(w->ffn_norm) + nb(w->hc_ffn_base) +
						    nb(w->hc_ffn_scale));
			PUT(b, "moe_routed_gate_up", (nb(w->ffn_gate_exps) + nb(w->ffn_up_exps)) / E * k);
			PUT(b, "moe_down_update", nb(w->ffn_down_exps) / E * k + nb(w->ffn_down_shexp) + next);
		} else {
			PUT(b, "dense_gate_up", nb(w->ffn_gate) + nb(w->ffn_up) + nb(w->ffn_norm) +
						nb(w->hc_ffn_base) + nb(w->hc_ffn_scale));
			PUT(b, "dense_down_update", nb(w->ffn_down) + next);
		}
	}
	PUT(-1, "head", nb(m->output) + nb(m->output_norm));
#undef PUT
	return n;
}

uint64_t x4_step_token_bytes(const x4_model *m)
{
	const x4_config *c = &m->c;
	uint64_t n = m->output->nbytes + m->output_norm->nbytes +
		     m->token_embd->nbytes / (uint64_t)X4_MAX(1, c->n_vocab);
	for (int b = 0; b < c->n_block; b++) {
		const x4_block_w *w = &m->blk[b];
#define X4_SUM_(f, ...) n += w->f ? w->f->nbytes : 0;
		X4_BLOCK_TENSORS(X4_SUM_)
#undef X4_SUM_
		if (w->moe && c->n_expert > 0) { /* k of E experts' rows, not all */
			uint64_t ex = w->ffn_gate_exps->nbytes + w->ffn_up_exps->nbytes +
				      w->ffn_down_exps->nbytes;
			n -= ex - ex / (uint64_t)c->n_expert * (uint64_t)c->n_expert_used;
		}
	}
	return n;
}

