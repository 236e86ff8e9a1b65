/*
 * trunk.c - the public trunk API, dispatching on opts->device: -1 runs the
 * CPU reference trunk (lib/trunk_cpu*.c), an ordinal >= 0 the CUDA trunk
 * (lib/trunk_cuda.c).  Both keep the same contract, so the tools never ask
 * which one they hold.
 */
#include "trunk_int.h"

#include <math.h>

struct x4_trunk {
	x4_trunk_cpu *cpu;   /* exactly one of the two is set */
	x4_trunk_cuda *cuda;
	float *row;          /* [n_vocab] the CPU's last logits for forward_next, kept */
};

void x4_trunk_opts_default(x4_trunk_opts *o)
{
	memset(o, 0, sizeof *o);
	o->device = -1;
	o->resid = X4_RESID_F32;
	o->prec = X4_PREC_F32;
}

int x4_trunk_create(x4_trunk **out, const x4_model *m, const x4_trunk_opts *o, x4_err *e)
{
	*out = NULL;
	x4_trunk_opts def;
	if (!o) {
		x4_trunk_opts_default(&def);
		o = &def;
	}
	if (o->resid < X4_RESID_F32 || o->resid > X4_RESID_BF16)
		return x4_err_set(e, X4_EINVAL, "residual width %d is not one of f32, f16, bf16",
				  o->resid);
	if (o->sublayer < X4_SUB_F32 || o->sublayer > X4_SUB_F16)
		return x4_err_set(e, X4_EINVAL, "sublayer input width %d is not one of f32, bf16, "
				  "f16", o->sublayer);
	if (o->prec != X4_PREC_F32 && o->prec != X4_PREC_F64)
		return x4_err_set(e, X4_EINVAL, "precision %d is not one of f32, f64", o->prec);
	if (o->device < -1)
		return x4_err_set(e, X4_EINVAL, "device %d: use -1 for the CPU or a CUDA ordinal",
				  o->device);
	if (o->device >= 0 && o->prec == X4_PREC_F64)
		return x4_err_set(e, X4_EINVAL, "the float64 trunk runs on the CPU only; "
				  "use --device cpu with it");
	x4_trunk *t = x4_calloc(1, sizeof *t, "the trunk", e);
	if (!t)
		return X4_ENOMEM;
	int rc = o->device < 0 ? x4_trunk_cpu_create(&t->cpu, m, o, e)
			       : x4_trunk_cuda_create(&t->cuda, m, o, e);
	if (rc) {
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void x4_trunk_free(x4_trunk *t)
{
	if (!t)
		return;
	if (t->cpu)
		x4_trunk_cpu_free(t->cpu);
	if (t->cuda)
		x4_trunk_cuda_free(t->cuda);
	free(t->row);
	free(t);
}

void x4_trunk_reset(x4_trunk *t)
{
	if (t->cpu)
		x4_trunk_cpu_reset(t->cpu);
	else
		x4_trunk_cuda_reset(t->cuda);
}

int x4_trunk_pos(const x4_trunk *t)
{
	return t->cpu ? x4_trunk_cpu_pos(t->cpu) : x4_trunk_cuda_pos(t->cuda);
}

int x4_trunk_forward(x4_trunk *t, const int32_t *ids, int n, float *logits, bool all_logits,
		     x4_err *e)
{
	if (t->cpu)
		return x4_trunk_cpu_forward(t->cpu, ids, n, logits, all_logits, e);
	return x4_trunk_cuda_forward(t->cuda, ids, n, logits, all_logits, e);
}

int x4_err_nonfinite_logits(x4_err *e, int pos)
{
	return x4_err_set(e, X4_ENUMERIC, "the logits at position %d are not finite: the "
			  "residual stream overflowed or a weight is not finite; run "
			  "x4-walk-residual on the same prompt to find the block where values "
			  "leave range (and keep the residual at --resid f32)", pos);
}

int x4_trunk_forward_next(x4_trunk *t, const int32_t *ids, int n, x4_sampler *smp,
			  const x4_sampler_opts *so, int32_t *next, x4_err *e)
{
	int pos = x4_trunk_pos(t) + n - 1;
	if (t->cuda) {
		float v = 0;
		int rc = x4_trunk_cuda_forward_next(t->cuda, ids, n, so, next, &v, e);
		if (!rc && !isfinite(v))
			return x4_err_nonfinite_logits(e, pos);
		return rc;
	}
	int nv = t->cpu->c->n_vocab;
	if (!t->row && !(t->row = x4_alloc(sizeof(float) * (size_t)nv, "one row of logits", e)))
		return X4_ENOMEM;
	float *logits = t->row;
	int rc = x4_trunk_cpu_forward(t->cpu, ids, n, logits, false, e);
	if (!rc) {
		*next = x4_sample(smp, logits, nv);
		/* The picked logit is NaN or infinite only when the row is not a
		 * distribution at all (x4_sample skips NaN; all-NaN picks 0). */
		if (!isfinite(logits[*next]))
			rc = x4_err_nonfinite_logits(e, pos);
	}
	return rc;
}

void x4_trunk_set_probe(x4_trunk *t, x4_probe_fn fn, void *ctx)
{
	if (t->cpu)
		x4_trunk_cpu_set_probe(t->cpu, fn, ctx);
	else
		x4_trunk_cuda_set_probe(t->cuda, fn, ctx);
}

int x4_trunk_get_stats(const x4_trunk *t, x4_trunk_stats *s)
{
	memset(s, 0, sizeof *s);
	if (t->cuda) {
		x4_trunk_cuda_stats(t->cuda, s);
		return 0;
	}
	/* The CPU reads the mapping in place: nothing is loaded or resident. */
	const x4_trunk_cpu *c = t->cpu;
	size_t elem = c->o.prec == X4_PREC_F64 ? sizeof(double) : sizeof(float);
	s->cache_bytes = (uint64_t)c->c->n_block * (uint64_t)c->max_ctx * (uint64_t)c->cw * elem;
	s->max_ctx = c->max_ctx;
	s->prefill_chunk = c->chunk;
	snprintf(s->device, sizeof s->device, "cpu");
	return 0;
}

x4_trunk_cpu *x4_trunk_cpu_part(x4_trunk *t) { return t->cpu; }
x4_trunk_cuda *x4_trunk_cuda_part(x4_trunk *t) { return t->cuda; }
