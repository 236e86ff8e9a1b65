/*
 * sample.c - picking a token from a row of logits on the host, by the one
 * rule the device sampler (kernels/sample.cu) follows: greedy is the argmax
 * (NaN skipped, the lowest id on ties); otherwise top-k and top-p cut the
 * candidates by an order-preserving key of logit / temperature, weights
 * are exp(z - max) in 2^-40 fixed point, and the draw walks the kept ids in
 * id order against u * kept mass, with u a counter-based hash of (seed,
 * step).  The rule's code is the kernel's reference (lib/ref/ref_misc.c);
 * this file keeps its scratch and its step counter.  So the same seed and
 * logits give the same ids on the CPU, on the GPU, and with or without
 * --dump-logits (docs/numerics.md, "Sampling").
 */
#include "x4_int.h"
#include "x4_kern.h"

#include <math.h>

struct x4_sampler {
	x4_sampler_opts o;
	uint64_t step;        /* draws made: the device counter's twin */
	void *scratch;        /* x4r_sample_scratch_bytes(cap) */
	int cap;
};

int x4_sampler_check(const x4_sampler_opts *o, x4_err *e)
{
	if (!(o->temperature >= 0) || !isfinite(o->temperature))
		return x4_err_set(e, X4_EINVAL, "temperature %g: use 0 (greedy) or a positive "
				  "number", o->temperature);
	if (o->top_k < 0)
		return x4_err_set(e, X4_EINVAL, "top-k %d: use 0 (off) or a positive count", o->top_k);
	if (!(o->top_p > 0 && o->top_p <= 1))
		return x4_err_set(e, X4_EINVAL, "top-p %g: use a number in (0, 1] (1 is off)",
				  o->top_p);
	return 0;
}

int x4_sampler_create(x4_sampler **out, const x4_sampler_opts *o, x4_err *e)
{
	*out = NULL;
	int rc = x4_sampler_check(o, e);
	if (rc)
		return rc;
	x4_sampler *s = x4_calloc(1, sizeof *s, "the sampler", e);
	if (!s)
		return X4_ENOMEM;
	s->o = *o;
	*out = s;
	return 0;
}

void x4_sampler_free(x4_sampler *s)
{
	if (s) {
		free(s->scratch);
		free(s);
	}
}

bool x4_sampler_greedy(const x4_sampler_opts *o)
{
	return o->temperature == 0 || o->top_k == 1;
}

int32_t x4_sample(x4_sampler *s, const float *logits, int n_vocab)
{
	if (n_vocab <= 0)
		return 0;
	if (x4_sampler_greedy(&s->o))
		return x4r_argmax(n_vocab, logits);
	if (s->cap < n_vocab) {
		void *p = realloc(s->scratch, x4r_sample_scratch_bytes(n_vocab));
		if (!p)
			return x4r_argmax(n_vocab, logits); /* no room to rank: degrade to greedy */
		s->scratch = p;
		s->cap = n_vocab;
	}
	/* Every draw advances the step, as the device's counter does. */
	return x4r_sample_ws(n_vocab, logits, s->o.temperature, s->o.top_k, s->o.top_p,
			     s->o.seed, s->step++, NULL, s->scratch);
}
