/*
 * replay.c - one MoE block in float64, straight from the file's bytes.
 *
 * The second check of docs/numerics.md 2 that a half-precision overflow is
 * a width bug and not a broken checkpoint: dequantize the block's expert
 * rows and run its MoE (docs/forward.md 7.2, 7.3) in double on the
 * activation the trunk saw.  If the loud expert is loud here too, the
 * magnitude is in the weights.  Its arithmetic shares no code with the
 * trunks on purpose (a second opinion); the expert selection is the one
 * rule of x4r_topk.
 */
#include "x4_int.h"
#include "x4_kern.h"

#include <math.h>

struct mat {
	const x4_gguf_tensor *t;
	uint64_t row_bytes;
};

static int bind(const x4_gguf *g, int block, const char *what, int n_dims, uint64_t ne0,
		uint64_t ne1, uint64_t ne2, struct mat *m, x4_err *e)
{
	char name[96];
	snprintf(name, sizeof name, "blk.%d.%s", block, what);
	const x4_gguf_tensor *t = x4_gguf_find_tensor(g, name);
	if (!t)
		return x4_err_set(e, X4_ENOTFOUND, "replay: tensor %s is not in the file", name);
	uint64_t want[3] = {ne0, ne1, ne2};
	for (int i = 0; i < 3; i++) {
		uint64_t have = t->ne[i];
		if (i < n_dims && want[i] && have != want[i])
			return x4_err_set(e, X4_ESHAPE,
					  "replay: %s has ne[%d] = %llu, the config says %llu",
					  name, i, (unsigned long long)have,
					  (unsigned long long)want[i]);
	}
	m->t = t;
	m->row_bytes = x4_type_bytes(t->type, t->ne[0]);
	if (!m->row_bytes)
		return x4_err_set(e, X4_ESHAPE, "replay: %s rows of %llu do not fill %s blocks",
				  name, (unsigned long long)t->ne[0], x4_type_name(t->type));
	return 0;
}

/* out[r] = row(r0 + r) . x for r < n, each row dequantized to float first:
 * the model is defined by the dequantized bytes (docs/forward.md 3.3). */
static int gemv(const struct mat *m, uint64_t r0, uint64_t n, const double *x, double *out,
		float *row, x4_err *e)
{
	uint64_t k = m->t->ne[0];
	for (uint64_t r = 0; r < n; r++) {
		const char *src = (const char *)m->t->data + (r0 + r) * m->row_bytes;
		int rc = x4_dequant(m->t->type, src, row, k, e);
		if (rc)
			return rc;
		double acc = 0;
		for (uint64_t i = 0; i < k; i++)
			acc += (double)row[i] * x[i];
		out[r] = acc;
	}
	return 0;
}

static double silu(double z) { return z / (1.0 + exp(-z)); }

static void magnitude(const double *v, int n, double *max, double *rms)
{
	double mx = 0, ss = 0;
	for (int i = 0; i < n; i++) {
		double a = fabs(v[i]);
		if (a > mx || isnan(a))
			mx = a;
		ss += v[i] * v[i];
	}
	*max = mx;
	*rms = sqrt(ss / n);
}

/* SwiGLU expert: out = down . (silu(gate . x) * (up . x)), on rows r0.. of
 * gate/up (width ff) and rows d0.. of down (width d). */
static int swiglu(const struct mat *gate, const struct mat *up, const struct mat *down,
		  uint64_t r0, uint64_t ff, uint64_t d0, uint64_t d, const double *x,
		  double *h, double *hu, double *out, float *row, x4_err *e)
{
	int rc = gemv(gate, r0, ff, x, h, row, e);
	if (!rc)
		rc = gemv(up, r0, ff, x, hu, row, e);
	if (rc)
		return rc;
	for (uint64_t i = 0; i < ff; i++)
		h[i] = silu(h[i]) * hu[i];
	return gemv(down, d0, d, h, out, row, e);
}

int x4_moe_replay_block(const x4_model *mdl, int block, const float *x_hat,
			const int *force, x4_moe_replay *r, double *y, x4_err *e)
{
	const x4_config *c = x4_model_config(mdl);
	const x4_gguf *g = x4_model_gguf(mdl);
	memset(r, 0, sizeof *r);
	if (block < c->n_dense || block >= c->n_block)
		return x4_err_set(e, X4_EINVAL,
				  "block %d is not an MoE block (the MoE blocks are %d..%d)", block,
				  c->n_dense, c->n_block - 1);
	if (c->n_expert_used > X4_REPLAY_MAX_USED || c->n_expert_used > c->n_expert)
		return x4_err_set(e, X4_EINVAL, "replay: %d experts used per token, at most %d",
				  c->n_expert_used, X4_REPLAY_MAX_USED);
	uint64_t D = (uint64_t)c->n_embd, F = (uint64_t)c->n_ff_exp, E = (uint64_t)c->n_expert;
	struct mat router, bias, gate, up, down, sgate, sup, sdown;
	int rc = bind(g, block, "ffn_gate_inp.weight", 2, D, E, 0, &router, e);
	if (!rc)
		rc = bind(g, block, "exp_probs_b.bias", 1, E, 0, 0, &bias, e);
	if (!rc)
		rc = bind(g, block, "ffn_gate_exps.weight", 3, D, F, E, &gate, e);
	if (!rc)
		rc = bind(g, block, "ffn_up_exps.weight", 3, D, F, E, &up, e);
	if (!rc)
		rc = bind(g, block, "ffn_down_exps.weight", 3, F, D, E, &down, e);
	/* A checkpoint with expert_shared_count 0 has no *_shexp tensors. */
	uint64_t FS = F * (uint64_t)c->n_expert_shared;
	if (!rc && FS)
		rc = bind(g, block, "ffn_gate_shexp.weight", 2, D, FS, 0, &sgate, e);
	if (!rc && FS)
		rc = bind(g, block, "ffn_up_shexp.weight", 2, D, FS, 0, &sup, e);
	if (!rc && FS)
		rc = bind(g, block, "ffn_down_shexp.weight", 2, FS, D, 0, &sdown, e);
	if (rc)
		return rc;
	uint64_t wide = X4_MAX(X4_MAX(D, F), X4_MAX(FS, E));

	double *x = x4_alloc(D * sizeof *x, "the replay input", e);
	double *acc = x4_calloc(D, sizeof *acc, "the replay sum", e);
	double *out = x4_alloc(D * sizeof *out, "the replay expert output", e);
	double *h = x4_alloc(wide * sizeof *h, "the replay hidden", e);
	double *hu = x4_alloc(wide * sizeof *hu, "the replay hidden", e);
	double *score = x4_alloc(E * sizeof *score, "the replay router", e);
	float *row = x4_alloc(wide * sizeof *row, "the replay row", e);
	float *b = x4_alloc(E * sizeof *b, "the replay bias", e);
	if (!x || !acc || !out || !h || !hu || !score || !row || !b) {
		rc = X4_ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < D; i++)
		x[i] = x_hat[i];

	/* Router (docs/forward.md 7.2): scores from the logits, selection by score+bias,
	 * weights from the unbiased scores. */
	rc = gemv(&router, 0, E, x, score, row, e);
	if (!rc)
		rc = x4_dequant(bias.t->type, bias.t->data, b, E, e);
	if (rc)
		goto out;
	for (uint64_t i = 0; i < E; i++) /* sigmoid: the only gate a checkpoint opens with */
		score[i] = 1.0 / (1.0 + exp(-score[i]));
	int k = c->n_expert_used;
	bool taken[256] = {0};
	if (E > 256) {
		rc = x4_err_set(e, X4_EINVAL, "replay: %llu experts, at most 256",
				(unsigned long long)E);
		goto out;
	}
	if (force) {
		for (int j = 0; j < k; j++) {
			int f = force[j];
			if (f < 0 || (uint64_t)f >= E || taken[f]) {
				rc = x4_err_set(e, X4_EINVAL, "replay: expert %d is out of range or repeated", f);
				goto out;
			}
			taken[f] = true;
		}
	} else {
		/* The selection ranks score + bias by the one top-k rule. */
		int sel[X4_REPLAY_MAX_USED];
		for (uint64_t i = 0; i < E; i++)
			h[i] = score[i] + b[i];
		x4r_topk(h, (int)E, k, sel);
		for (int j = 0; j < k; j++)
			taken[sel[j]] = true;
	}
	r->routed_here = !force;
	double sum = 0;
	for (uint64_t i = 0; i < E; i++)
		if (taken[i]) {
			r->experts[r->n_used++] = (int)i;
			sum += score[i];
		}
	for (int j = 0; j < r->n_used; j++) {
		double s = score[r->experts[j]];
		r->weight[j] = c->expert_scale * (c->expert_norm ? s / (sum + 1e-20) : s);
	}

	/* Routed experts in ascending id (HF's index_add_ order), then the shared one. */
	for (int j = 0; j < r->n_used; j++) {
		uint64_t ex = (uint64_t)r->experts[j];
		rc = swiglu(&gate, &up, &down, ex * F, F, ex * D, D, x, h, hu, out, row, e);
		if (rc)
			goto out;
		magnitude(out, (int)D, &r->out_max[j], &r->out_rms[j]);
		for (uint64_t i = 0; i < D; i++)
			acc[i] += r->weight[j] * out[i];
	}
	if (FS) {
		rc = swiglu(&sgate, &sup, &sdown, 0, FS, 0, D, x, h, hu, out, row, e);
		if (rc)
			goto out;
		magnitude(out, (int)D, &r->shared_max, &r->shared_rms);
		for (uint64_t i = 0; i < D; i++)
			acc[i] += out[i];
	}
	magnitude(acc, (int)D, &r->y_max, &r->y_rms);
	if (y)
		memcpy(y, acc, D * sizeof *y);
out:
	free(x);
	free(acc);
	free(out);
	free(h);
	free(hu);
	free(score);
	free(row);
	free(b);
	return rc;
}
