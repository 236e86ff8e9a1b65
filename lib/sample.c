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

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

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
		s->s[i] = splitmix64(&x);
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
			c[n++] = (struct cand){ logits[i] / s->o.temperature, i };
	if (n == 0)
		return 0;
	qsort(c, (size_t)n, sizeof *c, cand_cmp);
	if (s->o.top_k > 0 && s->o.top_k < n)
		n = s->o.top_k;
	/* Softmax over what is kept, in double so the cumulative sum is exact
	 * enough for top-p's cut not to wobble with the vocabulary's size. */
	double mx = c[0].v, sum = 0;
	for (int i = 0; i < n; i++)
		sum += exp((double)c[i].v - mx);
	double cum = 0;
	int keep = n;
	for (int i = 0; i < n; i++) {
		double p = exp((double)c[i].v - mx) / sum;
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
	double r = (double)(xoshiro_next(s->s) >> 11) * 0x1.0p-53 * tot;
	double acc = 0;
	for (int i = 0; i < keep; i++) {
		acc += c[i].v;
		if (r < acc)
			return c[i].id;
	}
	return c[keep - 1].id;
}
