/*
 * sample.c - picking a token from a row of logits: greedy, temperature,
 * top-k and top-p, from a seeded generator so a run can be repeated
 * exactly (the same seed and logits give the same ids on any machine).
 */
#include "x4_int.h"

#include <math.h>

struct x4_sampler {
	x4_sampler_opts o;
	uint64_t s[4];        /* xoshiro256** state */
	struct cand *c;       /* [cap] scratch */
	int cap;
};

struct cand {
	float v;  /* logit / temperature, then probability */
	int32_t id;
};

int x4_sampler_create(x4_sampler **out, const x4_sampler_opts *o, x4_err *e)
{
	*out = NULL;
	if (!(o->temperature >= 0) || !isfinite(o->temperature))
		return x4_err_set(e, X4_EINVAL, "temperature %g: use 0 (greedy) or a positive "
				  "number", o->temperature);
	if (o->top_k < 0)
		return x4_err_set(e, X4_EINVAL, "top-k %d: use 0 (off) or a positive count", o->top_k);
	if (!(o->top_p > 0 && o->top_p <= 1))
		return x4_err_set(e, X4_EINVAL, "top-p %g: use a number in (0, 1] (1 is off)",
				  o->top_p);
	x4_sampler *s = x4_calloc(1, sizeof *s, "the sampler", e);
	if (!s)
		return X4_ENOMEM;
	s->o = *o;
	uint64_t x = o->seed;
	for (int i = 0; i < 4; i++)
		s->s[i] = x4_splitmix64(&x);
	*out = s;
	return 0;
}

void x4_sampler_free(x4_sampler *s)
{
	if (s) {
		free(s->c);
		free(s);
	}
}

/* Highest first; the lower id first on equal values, so ties never depend
 * on qsort's order. */
static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->v != y->v)
		return x->v > y->v ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int32_t argmax(const float *l, int n)
{
	int32_t best = 0;
	float bv = -INFINITY;
	bool any = false;
	for (int i = 0; i < n; i++) {
		if (isnan(l[i]))
			continue;
		if (!any || l[i] > bv) {
			bv = l[i];
			best = i;
			any = true;
		}
	}
	return best;
}

int32_t x4_sample(x4_sampler *s, const float *logits, int n_vocab)
{
	if (n_vocab <= 0)
		return 0;
	if (s->o.temperature == 0 || s->o.top_k == 1)
		return argmax(logits, n_vocab);
	if (s->cap < n_vocab) {
		struct cand *c = realloc(s->c, sizeof *c * (size_t)n_vocab);
		if (!c)
			return argmax(logits, n_vocab); /* no room to rank: degrade to greedy */
		s->c = c;
		s->cap = n_vocab;
	}
	struct cand *c = s->c;
	int n = 0;
	for (int i = 0; i < n_vocab; i++)
		if (!isnan(logits[i]))
			c[n++] = (struct cand){ logits[i], i };
	if (n == 0)
		return 0;
	qsort(c, (size_t)n, sizeof *c, cand_cmp);
	/* An infinite best (+Inf, or every logit -Inf) has no softmax: it is
	 * the certain pick, the lowest id among equals. */
	if (!isfinite(c[0].v))
		return c[0].id;
	if (s->o.top_k > 0 && s->o.top_k < n)
		n = s->o.top_k;
	/* Softmax over what is kept, in double (the temperature divides the
	 * difference there, so a tiny one cannot overflow a float), and exact
	 * enough for top-p's cut not to wobble with the vocabulary's size. */
	double mx = c[0].v, sum = 0, tt = s->o.temperature;
	for (int i = 0; i < n; i++)
		sum += exp(((double)c[i].v - mx) / tt);
	double cum = 0;
	int keep = n;
	for (int i = 0; i < n; i++) {
		double p = exp(((double)c[i].v - mx) / tt) / sum;
		c[i].v = (float)p;
		cum += p;
		if (cum >= s->o.top_p) {
			keep = i + 1; /* at least one survives */
			break;
		}
	}
	double tot = 0;
	for (int i = 0; i < keep; i++)
		tot += c[i].v;
	double r = (double)(x4_xoshiro_next(s->s) >> 11) * 0x1.0p-53 * tot;
	double acc = 0;
	for (int i = 0; i < keep; i++) {
		acc += c[i].v;
		if (r < acc)
			return c[i].id;
	}
	return c[keep - 1].id;
}
