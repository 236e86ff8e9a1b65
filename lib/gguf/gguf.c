/*
 * gguf.c - the GGUF v2/v3 reader (docs/gguf.md 1).
 *
 * The file is hostile until proven otherwise: every count, length and
 * offset is checked against the bytes that remain before it is used, and
 * nothing is allocated in proportion to a count the file has not shown it
 * can hold.  A fault is one X4_EFORMAT naming the byte offset.  All reads go
 * through memcpy, since nothing in a GGUF header is naturally aligned.
 *
 * The reader accepts any aligned, non-overlapping data layout (what the
 * format allows, docs/gguf.md 1.4); the writer (gguf_write.c) produces the strict packed layout
 * current llama.cpp demands.  The values of keys are read through
 * gguf_get.c.
 */
#include "gguf_int.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define NAME_MAX_BYTES 63 /* ggml's GGML_MAX_NAME is 64, NUL included */
/* The smallest records possible, used to bound counts by the file's size:
 * a kv is a 1-byte key, its type and a 1-byte value; a tensor info is a
 * 1-byte name, n_dims, one dim, the type and the offset. */
#define KV_MIN_BYTES (8 + 1 + 4 + 1)
#define TINFO_MIN_BYTES (8 + 1 + 4 + 8 + 4 + 8)

struct cur {
	const uint8_t *b;
	uint64_t size, pos;
	x4_err *e;
};

static const char *const vtype_names[] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
	"u64", "i64", "f64",
};
static const int vtype_width[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

const char *x4_gguf_vtype_name(int vtype)
{
	if (vtype < 0 || vtype >= (int)X4_ARRAY_LEN(vtype_names))
		return "?";
	return vtype_names[vtype];
}

/* A name from the file, made safe to print: at most 80 bytes, no control
 * characters (a hostile name must not steer a terminal). */
static const char *show(char *buf, size_t cap, const uint8_t *s, uint64_t len)
{
	size_t n = 0;
	for (uint64_t i = 0; i < len && n + 4 < cap && i < 80; i++)
		buf[n++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
	if (len > 80 && n + 4 < cap) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = 0;
	return buf;
}

static int fmt_err(struct cur *c, uint64_t at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fmt_err(struct cur *c, uint64_t at, const char *fmt, ...)
{
	char msg[X4_ERR_MSG];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return x4_err_set(c->e, X4_EFORMAT, "byte %" PRIu64 ": %s", at, msg);
}

static int need(struct cur *c, uint64_t n, const char *what)
{
	if (n <= c->size - c->pos)
		return 0;
	return fmt_err(c, c->pos, "truncated: %s needs %" PRIu64 " bytes but only %" PRIu64
		       " remain (file is %" PRIu64 " bytes)", what, n, c->size - c->pos, c->size);
}

static int rd_u32(struct cur *c, uint32_t *v, const char *what)
{
	int rc = need(c, 4, what);
	if (rc)
		return rc;
	uint8_t b[4];
	memcpy(b, c->b + c->pos, 4);
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	c->pos += 4;
	return 0;
}

static int rd_u64(struct cur *c, uint64_t *v, const char *what)
{
	int rc = need(c, 8, what);
	if (rc)
		return rc;
	*v = x4_le64(c->b + c->pos);
	c->pos += 8;
	return 0;
}

/* A gguf string: u64 length, then the bytes. */
static int rd_str(struct cur *c, const uint8_t **s, uint64_t *len, const char *what)
{
	uint64_t at = c->pos;
	int rc = rd_u64(c, len, what);
	if (rc)
		return rc;
	if (*len > c->size - c->pos)
		return fmt_err(c, at, "%s has length %" PRIu64 " but only %" PRIu64
			       " bytes remain in the %" PRIu64 "-byte file (truncated or corrupt)",
			       what, *len, c->size - c->pos, c->size);
	*s = c->b + c->pos;
	c->pos += *len;
	return 0;
}

static uint64_t hash_bytes(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static const char *kv_name(const x4_gguf *g, int64_t i) { return g->kv[i].key; }
static const char *t_name(const x4_gguf *g, int64_t i) { return g->t[i].t.name; }

/* Returns the index already holding name, or -1 after inserting i. */
static int64_t tab_insert(const x4_gguf *g, int64_t *tab, uint64_t mask,
			  const char *(*name)(const x4_gguf *, int64_t), int64_t i)
{
	const char *s = name(g, i);
	for (uint64_t h = hash_bytes(s) & mask;; h = (h + 1) & mask) {
		if (!tab[h]) {
			tab[h] = i + 1;
			return -1;
		}
		if (!strcmp(name(g, tab[h] - 1), s))
			return tab[h] - 1;
	}
}

static int64_t tab_find(const x4_gguf *g, const int64_t *tab, uint64_t mask,
			const char *(*name)(const x4_gguf *, int64_t), const char *s)
{
	if (!tab || !s)
		return -1;
	for (uint64_t h = hash_bytes(s) & mask; tab[h]; h = (h + 1) & mask)
		if (!strcmp(name(g, tab[h] - 1), s))
			return tab[h] - 1;
	return -1;
}

/* A table with at least twice as many slots as entries, so probes stay short. */
static int tab_alloc(int64_t **tab, uint64_t *mask, int64_t n, x4_err *e)
{
	uint64_t cap = 16;
	while (cap < 2 * (uint64_t)n)
		cap *= 2;
	*tab = x4_calloc(cap, sizeof **tab, "a GGUF name table", e);
	*mask = cap - 1;
	return *tab ? 0 : X4_ENOMEM;
}

/* Names the magic of a few formats people mistake for GGUF. */
static const char *foreign_kind(const uint8_t *b, uint64_t size)
{
	if (!memcmp(b, "\x7f" "ELF", 4))
		return " (an ELF executable)";
	if (!memcmp(b, "PK\x03\x04", 4))
		return " (a zip archive, such as a PyTorch checkpoint)";
	if (!memcmp(b, "tjgg", 4) || !memcmp(b, "lmgg", 4) || !memcmp(b, "fmgg", 4))
		return " (a pre-GGUF ggml/GGJT file)";
	if (size > 8 && b[8] == '{')
		return " (perhaps a safetensors file)";
	if (b[0] == '{' || b[0] == '<' || b[0] == '#')
		return " (a text file)";
	return "";
}

static int parse_header(x4_gguf *g, struct cur *c, uint64_t *n_t, uint64_t *n_kv)
{
	if (c->size < 4)
		return fmt_err(c, 0, "truncated: the file is %" PRIu64
			       " bytes, too short to hold the 4-byte GGUF magic", c->size);
	if (memcmp(c->b, GGUF_MAGIC, 4)) {
		const uint8_t *b = c->b;
		return fmt_err(c, 0, "not a GGUF file: the first 4 bytes are %02x %02x %02x %02x%s",
			       b[0], b[1], b[2], b[3], foreign_kind(b, c->size));
	}
	c->pos = 4;
	int rc = rd_u32(c, &g->version, "the version");
	if (rc)
		return rc;
	if (g->version != 2 && g->version != 3) {
		if (!(g->version & 0xffff) && g->version)
			return fmt_err(c, 4, "version 0x%08" PRIx32 " looks byte-swapped: big-endian GGUF files are not supported", g->version);
		return fmt_err(c, 4, "GGUF version %" PRIu32 " is not supported (x4 reads versions 2 and 3)",
			       g->version);
	}
	if ((rc = rd_u64(c, n_t, "the tensor count")) || (rc = rd_u64(c, n_kv, "the kv count")))
		return rc;
	uint64_t rem = c->size - c->pos;
	if (*n_t > rem / TINFO_MIN_BYTES)
		return fmt_err(c, 8, "tensor count %" PRIu64 " cannot fit in a %" PRIu64
			       "-byte file (a tensor info takes at least %d bytes; truncated or corrupt)",
			       *n_t, c->size, TINFO_MIN_BYTES);
	rem -= *n_t * TINFO_MIN_BYTES;
	if (*n_kv > rem / KV_MIN_BYTES)
		return fmt_err(c, 16, "kv count %" PRIu64 " cannot fit in a %" PRIu64
			       "-byte file beside %" PRIu64 " tensor infos (a kv takes at least %d bytes; truncated or corrupt)",
			       *n_kv, c->size, *n_t, KV_MIN_BYTES);
	return 0;
}

static int parse_value(x4_gguf *g, struct cur *c, struct kv *k, const char *shown)
{
	char what[160];
	int rc;
	k->val_at = c->pos;
	if (k->type == X4_GV_STR) {
		snprintf(what, sizeof what, "the string value of key '%s'", shown);
		return rd_str(c, &k->val, &k->len, what);
	}
	if (k->type != X4_GV_ARR) {
		int w = vtype_width[k->type];
		snprintf(what, sizeof what, "the %s value of key '%s'", vtype_names[k->type], shown);
		if ((rc = need(c, w, what)))
			return rc;
		k->val = c->b + c->pos;
		if (k->type == X4_GV_BOOL && k->val[0] > 1)
			return fmt_err(c, c->pos, "bool key '%s' holds %u (a bool must be 0 or 1)",
				       shown, k->val[0]);
		c->pos += w;
		return 0;
	}
	uint32_t et;
	snprintf(what, sizeof what, "the element type of array '%s'", shown);
	if ((rc = rd_u32(c, &et, what)))
		return rc;
	if (et == X4_GV_ARR)
		return fmt_err(c, c->pos - 4, "array '%s' holds nested arrays, which GGUF readers do not support", shown);
	if (et > X4_GV_F64)
		return fmt_err(c, c->pos - 4, "array '%s' has unknown element type %" PRIu32, shown, et);
	k->elem = (int)et;
	uint64_t cnt_at = c->pos;
	snprintf(what, sizeof what, "the element count of array '%s'", shown);
	if ((rc = rd_u64(c, &k->len, what)))
		return rc;
	uint64_t rem = c->size - c->pos;
	uint64_t w = et == X4_GV_STR ? 8 : (uint64_t)vtype_width[et];
	if (k->len > rem / w)
		return fmt_err(c, cnt_at, "array '%s' of %" PRIu64 " %s elements (%" PRIu64
			       " bytes each at least) cannot fit in the %" PRIu64
			       " bytes left in the file (truncated or corrupt)",
			       shown, k->len, vtype_names[et], w, rem);
	k->val = c->b + c->pos;
	if (et != X4_GV_STR) {
		if (et == X4_GV_BOOL)
			for (uint64_t j = 0; j < k->len; j++)
				if (k->val[j] > 1)
					return fmt_err(c, c->pos + j, "element %" PRIu64 " of bool array '%s' holds %u (a bool must be 0 or 1)",
						       j, shown, k->val[j]);
		c->pos += k->len * w;
		return 0;
	}
	/* Bounded above by the file's size / 8, so the index costs at most
	 * the file's size; it makes element j O(1) for the tokenizer. */
	k->soff = x4_alloc(k->len * sizeof *k->soff, "a GGUF string array index", c->e);
	if (!k->soff)
		return X4_ENOMEM;
	for (uint64_t j = 0; j < k->len; j++) {
		const uint8_t *s;
		uint64_t n;
		k->soff[j] = c->pos;
		snprintf(what, sizeof what, "element %" PRIu64 " of string array '%s'", j, shown);
		if ((rc = rd_str(c, &s, &n, what)))
			return rc;
	}
	return 0;
}

static int parse_kvs(x4_gguf *g, struct cur *c, uint64_t n_kv)
{
	char shown[100], what[160];
	int rc;
	g->kv = x4_calloc(n_kv, sizeof *g->kv, "the GGUF kv table", c->e);
	if (!g->kv || tab_alloc(&g->kv_tab, &g->kv_mask, (int64_t)n_kv, c->e))
		return X4_ENOMEM;
	for (uint64_t i = 0; i < n_kv; i++) {
		struct kv *k = &g->kv[i];
		const uint8_t *s;
		uint64_t len;
		uint32_t type;
		k->key_at = c->pos;
		snprintf(what, sizeof what, "the key of kv %" PRIu64, i);
		if ((rc = rd_str(c, &s, &len, what)))
			return rc;
		if (!len)
			return fmt_err(c, k->key_at, "kv %" PRIu64 " has an empty key", i);
		show(shown, sizeof shown, s, len);
		if (memchr(s, 0, len))
			return fmt_err(c, k->key_at, "key '%s' contains a NUL byte", shown);
		if (!(k->key = x4_alloc(len + 1, "a GGUF key", c->e)))
			return X4_ENOMEM;
		memcpy(k->key, s, len);
		k->key[len] = 0;
		g->n_kv = (int64_t)i + 1; /* from here on close() frees it */
		int64_t dup = tab_insert(g, g->kv_tab, g->kv_mask, kv_name, (int64_t)i);
		if (dup >= 0)
			return fmt_err(c, k->key_at, "duplicate key '%s' (first at byte %" PRIu64 ")",
				       shown, g->kv[dup].key_at);
		snprintf(what, sizeof what, "the value type of key '%s'", shown);
		if ((rc = rd_u32(c, &type, what)))
			return rc;
		if (type > X4_GV_F64)
			return fmt_err(c, c->pos - 4, "key '%s' has unknown value type %" PRIu32, shown, type);
		k->type = (int)type;
		if ((rc = parse_value(g, c, k, shown)))
			return rc;
	}
	return 0;
}

static int parse_alignment(x4_gguf *g, struct cur *c)
{
	g->align = 32;
	int64_t i = x4_gguf_find_kv(g, "general.alignment");
	if (i < 0)
		return 0;
	const struct kv *k = &g->kv[i];
	if (k->type != X4_GV_U32)
		return fmt_err(c, k->val_at, "general.alignment is a %s; it must be a u32",
			       vtype_names[k->type]);
	uint32_t a;
	memcpy(&a, k->val, 4);
	if (!a || (a & (a - 1)))
		return fmt_err(c, k->val_at, "general.alignment %" PRIu32 " is not a nonzero power of two", a);
	g->align = a;
	return 0;
}

/* "BF16 [3584, 768]" */
static const char *shape_str(char *buf, size_t cap, const x4_gguf_tensor *t)
{
	int n = snprintf(buf, cap, "%s [", x4_type_name(t->type));
	for (int d = 0; d < t->n_dims && n > 0 && (size_t)n < cap; d++)
		n += snprintf(buf + n, cap - n, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
	if (n > 0 && (size_t)n < cap)
		snprintf(buf + n, cap - n, "]");
	return buf;
}

static int parse_tensor(x4_gguf *g, struct cur *c, int64_t i)
{
	struct tensor *ti = &g->t[i];
	x4_gguf_tensor *t = &ti->t;
	char shown[100], what[160];
	const uint8_t *s;
	uint64_t len;
	uint32_t nd, type;
	int rc;
	ti->at = c->pos;
	snprintf(what, sizeof what, "the name of tensor %" PRId64, i);
	if ((rc = rd_str(c, &s, &len, what)))
		return rc;
	show(shown, sizeof shown, s, len);
	if (!len)
		return fmt_err(c, ti->at, "tensor %" PRId64 " has an empty name", i);
	if (len > NAME_MAX_BYTES)
		return fmt_err(c, ti->at, "tensor name '%s' is %" PRIu64 " bytes long (at most %d)",
			       shown, len, NAME_MAX_BYTES);
	if (memchr(s, 0, len))
		return fmt_err(c, ti->at, "tensor name '%s' contains a NUL byte", shown);
	char *name = x4_alloc(len + 1, "a GGUF tensor name", c->e);
	if (!name)
		return X4_ENOMEM;
	memcpy(name, s, len);
	name[len] = 0;
	t->name = name;
	g->n_t = i + 1;
	int64_t dup = tab_insert(g, g->t_tab, g->t_mask, t_name, i);
	if (dup >= 0)
		return fmt_err(c, ti->at, "duplicate tensor name '%s' (first at byte %" PRIu64 ")",
			       shown, g->t[dup].at);
	snprintf(what, sizeof what, "n_dims of tensor '%s'", shown);
	if ((rc = rd_u32(c, &nd, what)))
		return rc;
	if (nd < 1 || nd > 4)
		return fmt_err(c, c->pos - 4, "tensor '%s' has n_dims %" PRIu32 " (must be 1..4)", shown, nd);
	t->n_dims = (int)nd;
	t->n_elems = 1;
	for (int d = 0; d < 4; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < nd; d++) {
		snprintf(what, sizeof what, "dimension %" PRIu32 " of tensor '%s'", d, shown);
		if ((rc = rd_u64(c, &t->ne[d], what)))
			return rc;
		if (!t->ne[d])
			return fmt_err(c, c->pos - 8, "tensor '%s' dimension %" PRIu32 " is 0", shown, d);
		if (__builtin_mul_overflow(t->n_elems, t->ne[d], &t->n_elems) ||
		    t->n_elems > (uint64_t)INT64_MAX)
			return fmt_err(c, c->pos - 8, "tensor '%s': the product of its dimensions overflows 63 bits (dimension %" PRIu32 " is %" PRIu64 ")",
				       shown, d, t->ne[d]);
	}
	snprintf(what, sizeof what, "the type of tensor '%s'", shown);
	if ((rc = rd_u32(c, &type, what)))
		return rc;
	if (type > 1024 || !x4_type_known((int)type))
		return fmt_err(c, c->pos - 4, "tensor '%s' has type id %" PRIu32 " (%s), which x4 cannot read (it reads F32, F16, BF16, Q8_0, Q4_K, Q6_K, IQ4_NL)",
			       shown, type, type > 1024 ? "?" : x4_type_name((int)type));
	t->type = (int)type;
	uint64_t be = (uint64_t)x4_type_block_elems(t->type);
	uint64_t bb = (uint64_t)x4_type_block_bytes(t->type);
	if (t->ne[0] % be)
		return fmt_err(c, c->pos - 4, "tensor '%s' (%s) has ne[0] = %" PRIu64 ", not a multiple of the type's %" PRIu64 "-element block",
			       shown, x4_type_name(t->type), t->ne[0], be);
	if (__builtin_mul_overflow(t->n_elems / be, bb, &t->nbytes))
		return fmt_err(c, c->pos - 4, "tensor '%s': its size in bytes overflows 64 bits", shown);
	ti->off_at = c->pos;
	snprintf(what, sizeof what, "the data offset of tensor '%s'", shown);
	if ((rc = rd_u64(c, &t->offset, what)))
		return rc;
	if (t->offset % g->align)
		return fmt_err(c, ti->off_at, "tensor '%s' has data offset %" PRIu64 ", not a multiple of the alignment %" PRIu32,
			       shown, t->offset, g->align);
	return 0;
}

static int by_offset(const void *a, const void *b)
{
	const struct tensor *x = *(const struct tensor *const *)a, *y = *(const struct tensor *const *)b;
	return x->t.offset < y->t.offset ? -1 : x->t.offset > y->t.offset;
}

static int place_tensors(x4_gguf *g, struct cur *c)
{
	char shown[100], shape[96];
	uint64_t end_info = c->pos;
	/* end_info <= size < 2^64 - align, so this cannot wrap. */
	g->data_off = (end_info + g->align - 1) / g->align * g->align;
	if (!g->n_t)
		return 0;
	if (g->data_off > c->size)
		return fmt_err(c, end_info, "truncated: the data section would start at byte %" PRIu64
			       ", past the end of the %" PRIu64 "-byte file", g->data_off, c->size);
	uint64_t room = c->size - g->data_off;
	for (int64_t i = 0; i < g->n_t; i++) {
		x4_gguf_tensor *t = &g->t[i].t;
		if (t->offset > room || t->nbytes > room - t->offset) {
			uint64_t start, end;
			bool wraps = __builtin_add_overflow(g->data_off, t->offset, &start) ||
				     __builtin_add_overflow(start, t->nbytes, &end);
			char needs[48];
			if (wraps)
				snprintf(needs, sizeof needs, "more than 2^64");
			else
				snprintf(needs, sizeof needs, "%" PRIu64, end);
			return fmt_err(c, g->t[i].off_at, "tensor '%s' (%s, %" PRIu64 " bytes at data offset %" PRIu64
				       ") runs past the end of the file (file is %" PRIu64 " bytes, needs %s; truncated?)",
				       show(shown, sizeof shown, (const uint8_t *)t->name, strlen(t->name)),
				       shape_str(shape, sizeof shape, t), t->nbytes, t->offset, c->size, needs);
		}
		t->data = g->base + g->data_off + t->offset;
	}
	struct tensor **ord = x4_alloc(g->n_t * sizeof *ord, "the GGUF tensor order", c->e);
	if (!ord)
		return X4_ENOMEM;
	for (int64_t i = 0; i < g->n_t; i++)
		ord[i] = &g->t[i];
	qsort(ord, g->n_t, sizeof *ord, by_offset);
	for (int64_t i = 1; i < g->n_t; i++) {
		const x4_gguf_tensor *a = &ord[i - 1]->t, *b = &ord[i]->t;
		if (a->offset + a->nbytes > b->offset) {
			char other[100];
			show(other, sizeof other, (const uint8_t *)a->name, strlen(a->name));
			int rc = fmt_err(c, ord[i]->off_at, "tensor '%s' (data bytes %" PRIu64 "..%" PRIu64
					 ") overlaps tensor '%s' (data bytes %" PRIu64 "..%" PRIu64 ")",
					 show(shown, sizeof shown, (const uint8_t *)b->name, strlen(b->name)),
					 b->offset, b->offset + b->nbytes, other, a->offset,
					 a->offset + a->nbytes);
			free(ord);
			return rc;
		}
	}
	free(ord);
	return 0;
}

static int parse(x4_gguf *g, x4_err *e)
{
	struct cur c = { .b = g->base, .size = g->size, .pos = 0, .e = e };
	/* Zeroed: at -O3 GCC 12 cannot see that parse_header fails (nonzero)
	 * whenever it leaves them unset. */
	uint64_t n_t = 0, n_kv = 0;
	int rc;
	if ((rc = parse_header(g, &c, &n_t, &n_kv)) || (rc = parse_kvs(g, &c, n_kv)) ||
	    (rc = parse_alignment(g, &c)))
		return rc;
	g->t = x4_calloc(n_t, sizeof *g->t, "the GGUF tensor table", e);
	if (!g->t || tab_alloc(&g->t_tab, &g->t_mask, (int64_t)n_t, e))
		return X4_ENOMEM;
	for (uint64_t i = 0; i < n_t; i++)
		if ((rc = parse_tensor(g, &c, (int64_t)i)))
			return rc;
	return place_tensors(g, &c);
}

int x4_gguf_open_mem(x4_gguf **out, const void *data, size_t size, x4_err *e)
{
	*out = NULL;
	if (!data && size)
		return x4_err_set(e, X4_EINVAL, "x4_gguf_open_mem: NULL buffer");
	x4_gguf *g = x4_calloc(1, sizeof *g, "a GGUF handle", e);
	if (!g)
		return X4_ENOMEM;
	g->base = data ? data : (const uint8_t *)"";
	g->size = size;
	int rc = parse(g, e);
	if (rc) {
		x4_gguf_close(g);
		return rc;
	}
	*out = g;
	return 0;
}

int x4_gguf_open(x4_gguf **out, const char *path, x4_err *e)
{
	*out = NULL;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
	 * below); a regular file ignores the flag. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return x4_err_set(e, errno == ENOENT ? X4_ENOTFOUND : X4_EIO, "%s: %s", path,
				  strerror(errno));
	struct stat st;
	if (fstat(fd, &st)) {
		int rc = x4_err_set(e, X4_EIO, "%s: %s", path, strerror(errno));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return x4_err_set(e, X4_EIO, "%s is not a regular file (%s): x4 maps a GGUF, so "
				  "it must be a file on disk; copy it to one", path,
				  S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a folder" :
				  S_ISCHR(st.st_mode) ? "a character device" :
				  S_ISSOCK(st.st_mode) ? "a socket" : S_ISBLK(st.st_mode) ?
				  "a block device" : "not a plain file");
	}
	void *map = NULL;
	if (st.st_size > 0) {
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			int rc = x4_err_set(e, X4_EIO, "%s: mmap of %lld bytes failed: %s", path,
					    (long long)st.st_size, strerror(errno));
			close(fd);
			return rc;
		}
	}
	close(fd); /* the mapping keeps the file */
	int rc = x4_gguf_open_mem(out, map, (size_t)st.st_size, e);
	if (rc) {
		if (map)
			munmap(map, (size_t)st.st_size);
		if (e) {
			char msg[X4_ERR_MSG];
			snprintf(msg, sizeof msg, "%s", e->msg);
			x4_err_set(e, rc, "%s: %s", path, msg);
		}
		return rc;
	}
	(*out)->map = map;
	return 0;
}

void x4_gguf_close(x4_gguf *g)
{
	if (!g)
		return;
	for (int64_t i = 0; i < g->n_kv; i++) {
		free(g->kv[i].key);
		free(g->kv[i].soff);
	}
	for (int64_t i = 0; i < g->n_t; i++)
		free((char *)g->t[i].t.name);
	free(g->kv);
	free(g->t);
	free(g->kv_tab);
	free(g->t_tab);
	if (g->map)
		munmap(g->map, (size_t)g->size);
	free(g);
}

uint32_t x4_gguf_version(const x4_gguf *g) { return g->version; }
uint64_t x4_gguf_file_size(const x4_gguf *g) { return g->size; }
uint32_t x4_gguf_alignment(const x4_gguf *g) { return g->align; }
uint64_t x4_gguf_data_offset(const x4_gguf *g) { return g->data_off; }
const void *x4_gguf_base(const x4_gguf *g) { return g->base; }
int64_t x4_gguf_kv_count(const x4_gguf *g) { return g->n_kv; }
int64_t x4_gguf_tensor_count(const x4_gguf *g) { return g->n_t; }

int64_t x4_gguf_find_kv(const x4_gguf *g, const char *key)
{
	return tab_find(g, g->kv_tab, g->kv_mask, kv_name, key);
}

const x4_gguf_tensor *x4_gguf_tensor_at(const x4_gguf *g, int64_t i)
{
	return i >= 0 && i < g->n_t ? &g->t[i].t : NULL;
}

const x4_gguf_tensor *x4_gguf_find_tensor(const x4_gguf *g, const char *name)
{
	int64_t i = tab_find(g, g->t_tab, g->t_mask, t_name, name);
	return i >= 0 ? &g->t[i].t : NULL;
}
