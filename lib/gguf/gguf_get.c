/*
 * gguf_get.c - reading the values of a parsed GGUF file's keys: by index
 * (x4_gguf_kv_*, a bare code, for walking every key) and by name
 * (x4_gguf_get_*, a message naming the key, its offset and the type it has
 * when it is not the one asked for).
 */
#include "gguf_int.h"

#include <inttypes.h>

const char *x4_gguf_kv_key(const x4_gguf *g, int64_t i)
{
	return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

int x4_gguf_kv_type(const x4_gguf *g, int64_t i)
{
	return i >= 0 && i < g->n_kv ? g->kv[i].type : -1;
}

/* An integer scalar as sign and magnitude, so that every width converts
 * without a wider type. */
static int kv_int(const struct kv *k, bool *neg, uint64_t *mag)
{
	uint64_t u = 0;
	int64_t s = 0;
	bool sign = false;
	switch (k->type) {
	case X4_GV_U8: u = k->val[0]; break;
	case X4_GV_I8: { int8_t v; memcpy(&v, k->val, 1); s = v; sign = true; break; }
	case X4_GV_U16: { uint16_t v; memcpy(&v, k->val, 2); u = v; break; }
	case X4_GV_I16: { int16_t v; memcpy(&v, k->val, 2); s = v; sign = true; break; }
	case X4_GV_U32: { uint32_t v; memcpy(&v, k->val, 4); u = v; break; }
	case X4_GV_I32: { int32_t v; memcpy(&v, k->val, 4); s = v; sign = true; break; }
	case X4_GV_U64: memcpy(&u, k->val, 8); break;
	case X4_GV_I64: memcpy(&s, k->val, 8); sign = true; break;
	default: return X4_EFORMAT;
	}
	*neg = sign && s < 0;
	*mag = !sign ? u : s < 0 ? (uint64_t)(-(s + 1)) + 1 : (uint64_t)s;
	return 0;
}

int x4_gguf_kv_u64(const x4_gguf *g, int64_t i, uint64_t *v)
{
	bool neg;
	uint64_t m;
	if (i < 0 || i >= g->n_kv)
		return X4_EINVAL;
	if (kv_int(&g->kv[i], &neg, &m) || neg)
		return X4_EFORMAT;
	*v = m;
	return 0;
}

int x4_gguf_kv_i64(const x4_gguf *g, int64_t i, int64_t *v)
{
	bool neg;
	uint64_t m;
	if (i < 0 || i >= g->n_kv)
		return X4_EINVAL;
	if (kv_int(&g->kv[i], &neg, &m))
		return X4_EFORMAT;
	if (neg ? m > (uint64_t)INT64_MAX + 1 : m > (uint64_t)INT64_MAX)
		return X4_EFORMAT;
	*v = neg ? -(int64_t)(m - 1) - 1 : (int64_t)m;
	return 0;
}

int x4_gguf_kv_f64(const x4_gguf *g, int64_t i, double *v)
{
	if (i < 0 || i >= g->n_kv)
		return X4_EINVAL;
	const struct kv *k = &g->kv[i];
	if (k->type == X4_GV_F32) {
		float f;
		memcpy(&f, k->val, 4);
		*v = f;
	} else if (k->type == X4_GV_F64) {
		memcpy(v, k->val, 8);
	} else {
		return X4_EFORMAT;
	}
	return 0;
}

int x4_gguf_kv_str(const x4_gguf *g, int64_t i, const char **s, uint64_t *len)
{
	if (i < 0 || i >= g->n_kv)
		return X4_EINVAL;
	if (g->kv[i].type != X4_GV_STR)
		return X4_EFORMAT;
	*s = (const char *)g->kv[i].val;
	*len = g->kv[i].len;
	return 0;
}

int x4_gguf_kv_arr(const x4_gguf *g, int64_t i, int *elem_type, uint64_t *n,
		   const void **data)
{
	if (i < 0 || i >= g->n_kv)
		return X4_EINVAL;
	const struct kv *k = &g->kv[i];
	if (k->type != X4_GV_ARR)
		return X4_EFORMAT;
	*elem_type = k->elem;
	*n = k->len;
	/* String elements are not packed: they are reached by kv_arr_str. */
	*data = k->elem == X4_GV_STR ? NULL : k->val;
	return 0;
}

int x4_gguf_kv_arr_str(const x4_gguf *g, int64_t i, uint64_t j, const char **s,
		       uint64_t *len)
{
	if (i < 0 || i >= g->n_kv)
		return X4_EINVAL;
	const struct kv *k = &g->kv[i];
	if (k->type != X4_GV_ARR || k->elem != X4_GV_STR)
		return X4_EFORMAT;
	if (j >= k->len)
		return X4_EINVAL;
	*len = x4_le64(g->base + k->soff[j]);
	*s = (const char *)g->base + k->soff[j] + 8;
	return 0;
}

/* "a string", "an array of f32" */
static const char *kv_type_str(char *buf, size_t cap, const struct kv *k)
{
	if (k->type == X4_GV_ARR)
		snprintf(buf, cap, "an array of %s", x4_gguf_vtype_name(k->elem));
	else
		snprintf(buf, cap, "a %s", x4_gguf_vtype_name(k->type));
	return buf;
}

static int get_kv(const x4_gguf *g, const char *key, const struct kv **k, x4_err *e)
{
	int64_t i = x4_gguf_find_kv(g, key);
	*k = NULL; /* x4_err_set's nonzero return is out of gcc's sight here */
	if (i < 0)
		return x4_err_set(e, X4_ENOTFOUND, "key '%s' not found", key);
	*k = &g->kv[i];
	return 0;
}

static int mismatch(const struct kv *k, const char *want, x4_err *e)
{
	char have[32];
	return x4_err_set(e, X4_EFORMAT, "byte %" PRIu64 ": key '%s' is %s, expected %s",
			  k->val_at, k->key, kv_type_str(have, sizeof have, k), want);
}

int x4_gguf_get_u64(const x4_gguf *g, const char *key, uint64_t *v, x4_err *e)
{
	const struct kv *k;
	bool neg;
	uint64_t m;
	int rc = get_kv(g, key, &k, e);
	if (rc)
		return rc;
	if (kv_int(k, &neg, &m))
		return mismatch(k, "an unsigned integer", e);
	if (neg)
		return x4_err_set(e, X4_EFORMAT, "byte %" PRIu64 ": key '%s' holds -%" PRIu64
				  " (a %s), expected a value >= 0", k->val_at, key, m, x4_gguf_vtype_name(k->type));
	*v = m;
	return 0;
}

int x4_gguf_get_i64(const x4_gguf *g, const char *key, int64_t *v, x4_err *e)
{
	const struct kv *k;
	int rc = get_kv(g, key, &k, e);
	if (rc)
		return rc;
	rc = x4_gguf_kv_i64(g, k - g->kv, v);
	if (rc && k->type == X4_GV_U64)
		return x4_err_set(e, X4_EFORMAT, "byte %" PRIu64 ": key '%s' holds %" PRIu64
				  " (a u64), which does not fit an i64", k->val_at, key, x4_le64(k->val));
	if (rc)
		return mismatch(k, "an integer", e);
	return 0;
}

int x4_gguf_get_f64(const x4_gguf *g, const char *key, double *v, x4_err *e)
{
	const struct kv *k;
	int rc = get_kv(g, key, &k, e);
	if (rc)
		return rc;
	if (x4_gguf_kv_f64(g, k - g->kv, v))
		return mismatch(k, "a f32 or f64", e);
	return 0;
}

int x4_gguf_get_bool(const x4_gguf *g, const char *key, bool *v, x4_err *e)
{
	const struct kv *k;
	int rc = get_kv(g, key, &k, e);
	if (rc)
		return rc;
	if (k->type != X4_GV_BOOL)
		return mismatch(k, "a bool", e);
	*v = k->val[0] != 0;
	return 0;
}

int x4_gguf_get_str(const x4_gguf *g, const char *key, const char **s,
		    uint64_t *len, x4_err *e)
{
	const struct kv *k;
	int rc = get_kv(g, key, &k, e);
	if (rc)
		return rc;
	if (x4_gguf_kv_str(g, k - g->kv, s, len))
		return mismatch(k, "a string", e);
	return 0;
}
