/*
 * test_gguf.c - the GGUF reader and writer.
 *
 * (a) a round trip through the writer and the reader (every key type the
 *     writer has, arrays, tensors of every type at odd sizes, written from
 *     several threads), checking the strict padded layout byte by byte;
 * (b) a table of malformed files, each built from a small hand-laid image
 *     whose field positions are known, so that every row checks both the
 *     error text and the byte offset it names;
 * (c) every truncation length and a few thousand random byte flips.
 *
 * `test_gguf --write-seeds DIR` writes the small valid images used as fuzz
 * seeds (tests/fuzz-seeds/).
 */
#include "x4.h"
#include "t.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#define X4_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define X4_MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- a hand-laid image whose field positions are recorded ---- */

enum field {
	F_MAGIC, F_VERSION, F_NT, F_NKV,
	F_K0_KEY, F_K0_VAL, F_K1_TYPE, F_K1_VAL, F_K2_ELEM, F_K2_COUNT,
	F_K3_KEY, F_K3_VAL,
	F_T0, F_T0_ND, F_T0_DIM0, F_T0_DIM1, F_T0_TYPE, F_T0_OFF,
	F_T1, F_T1_OFF, F_END_INFO, F_DATA, F_END, F_COUNT,
};

struct img {
	uint8_t b[1024];
	size_t n;
	size_t pos[F_COUNT];
};

static size_t put_le(struct img *m, uint64_t v, int bytes)
{
	size_t at = m->n;
	for (int i = 0; i < bytes; i++)
		m->b[m->n++] = (uint8_t)(v >> (8 * i));
	return at;
}

static size_t put_s(struct img *m, const char *s)
{
	size_t at = put_le(m, strlen(s), 8);
	memcpy(m->b + m->n, s, strlen(s));
	m->n += strlen(s);
	return at;
}

/* Five keys (string, the alignment, a string array, a bool, an f32 array)
 * and two tensors: t0 IQ4_NL [32, 2] (36 bytes at 0), t1 F32 [8] (32 bytes
 * at 64), data padded to 32. */
static void base_image(struct img *m)
{
	memset(m, 0, sizeof *m);
	memcpy(m->b, "GGUF", 4);
	m->n = 4;
	m->pos[F_VERSION] = put_le(m, 3, 4);
	m->pos[F_NT] = put_le(m, 2, 8);
	m->pos[F_NKV] = put_le(m, 5, 8);
	m->pos[F_K0_KEY] = put_s(m, "general.architecture");
	put_le(m, X4_GV_STR, 4);
	m->pos[F_K0_VAL] = put_s(m, "xing4_0");
	put_s(m, "general.alignment");
	m->pos[F_K1_TYPE] = put_le(m, X4_GV_U32, 4);
	m->pos[F_K1_VAL] = put_le(m, 32, 4);
	put_s(m, "x.arr");
	put_le(m, X4_GV_ARR, 4);
	m->pos[F_K2_ELEM] = put_le(m, X4_GV_STR, 4);
	m->pos[F_K2_COUNT] = put_le(m, 2, 8);
	put_s(m, "x");
	put_s(m, "yz");
	m->pos[F_K3_KEY] = put_s(m, "x.flg");
	put_le(m, X4_GV_BOOL, 4);
	m->pos[F_K3_VAL] = put_le(m, 1, 1);
	put_s(m, "x.f32");
	put_le(m, X4_GV_ARR, 4);
	put_le(m, X4_GV_F32, 4);
	put_le(m, 2, 8);
	put_le(m, 0x3f800000, 4);
	put_le(m, 0x40000000, 4);
	m->pos[F_T0] = put_s(m, "t0");
	m->pos[F_T0_ND] = put_le(m, 2, 4);
	m->pos[F_T0_DIM0] = put_le(m, 32, 8);
	m->pos[F_T0_DIM1] = put_le(m, 2, 8);
	m->pos[F_T0_TYPE] = put_le(m, X4_T_IQ4_NL, 4);
	m->pos[F_T0_OFF] = put_le(m, 0, 8);
	m->pos[F_T1] = put_s(m, "t1");
	put_le(m, 1, 4);
	put_le(m, 8, 8);
	put_le(m, X4_T_F32, 4);
	m->pos[F_T1_OFF] = put_le(m, 64, 8);
	m->pos[F_END_INFO] = m->n;
	m->n = (m->n + 31) / 32 * 32;
	m->pos[F_DATA] = m->n;
	for (int i = 0; i < 96; i++)
		m->b[m->n++] = (uint8_t)(i * 37 + 11);
	m->pos[F_END] = m->n;
}

/* Every getter on every key, every array element, every tensor byte: what
 * a hostile file must survive after it has been accepted. */
static uint64_t walk(const x4_gguf *g)
{
	uint64_t h = 0;
	x4_err e;
	for (int64_t i = 0; i < x4_gguf_kv_count(g); i++) {
		const char *key = x4_gguf_kv_key(g, i), *s;
		uint64_t u, n, len;
		int64_t v;
		double f;
		bool b;
		int et;
		const void *data;
		h += strlen(key) + (uint64_t)x4_gguf_kv_type(g, i);
		if (!x4_gguf_get_u64(g, key, &u, &e)) h += u;
		if (!x4_gguf_get_i64(g, key, &v, &e)) h += (uint64_t)v;
		if (!x4_gguf_get_f64(g, key, &f, &e)) h += f == f;
		if (!x4_gguf_get_bool(g, key, &b, &e)) h += b;
		if (!x4_gguf_get_str(g, key, &s, &len, &e)) h += len ? (uint8_t)s[len - 1] : 0;
		if (!x4_gguf_kv_arr(g, i, &et, &n, &data)) {
			for (uint64_t j = 0; j < n; j++) {
				if (x4_gguf_kv_arr_str(g, i, j, &s, &len) == 0)
					h += len ? (uint8_t)s[0] + (uint8_t)s[len - 1] : 1;
				else if (data)
					h += ((const uint8_t *)data)[j];
			}
		}
	}
	for (int64_t i = 0; i < x4_gguf_tensor_count(g); i++) {
		const x4_gguf_tensor *t = x4_gguf_tensor_at(g, i);
		h += x4_gguf_find_tensor(g, t->name) == t;
		for (uint64_t j = 0; j < t->nbytes; j++)
			h += ((const uint8_t *)t->data)[j];
	}
	return h;
}

/* ---- (b) the malformed-file table ---- */

struct mcase {
	const char *name;
	int field;        /* where the mutation goes */
	int width;        /* 1, 4, 8: a little-endian integer; 0: raw bytes; -1: string bytes after the length */
	uint64_t value;
	const char *bytes;
	int nbytes;
	const char *want; /* substring of the message; NULL: must open */
	int at;           /* the field whose offset the message must name */
};

static const struct mcase mcases[] = {
	{ "bad-magic", F_MAGIC, 0, 0, "GGML", 4, "not a GGUF file: the first 4 bytes are 47 47 4d 4c", F_MAGIC },
	{ "elf-magic", F_MAGIC, 0, 0, "\x7f" "ELF", 4, "first 4 bytes are 7f 45 4c 46 (an ELF", F_MAGIC },
	{ "version-1", F_VERSION, 4, 1, 0, 0, "GGUF version 1 is not supported", F_VERSION },
	{ "version-4", F_VERSION, 4, 4, 0, 0, "GGUF version 4 is not supported", F_VERSION },
	{ "version-byteswapped", F_VERSION, 4, 0x03000000, 0, 0, "byte-swapped", F_VERSION },
	{ "version-2-accepted", F_VERSION, 4, 2, 0, 0, NULL, 0 },
	{ "tensor-count-absurd", F_NT, 8, INT64_MAX, 0, 0, "tensor count 9223372036854775807 cannot fit in a 384-byte file", F_NT },
	{ "tensor-count-2^64-1", F_NT, 8, UINT64_MAX, 0, 0, "tensor count 18446744073709551615 cannot fit", F_NT },
	{ "kv-count-absurd", F_NKV, 8, 1ull << 40, 0, 0, "kv count 1099511627776 cannot fit", F_NKV },
	{ "key-length-absurd", F_K0_KEY, 8, UINT64_MAX, 0, 0, "the key of kv 0 has length 18446744073709551615", F_K0_KEY },
	{ "string-length-absurd", F_K0_VAL, 8, 1ull << 60, 0, 0, "string value of key 'general.architecture' has length 1152921504606846976", F_K0_VAL },
	{ "array-count-absurd", F_K2_COUNT, 8, 1ull << 61, 0, 0, "array 'x.arr' of 2305843009213693952 string elements", F_K2_COUNT },
	{ "array-nested", F_K2_ELEM, 4, X4_GV_ARR, 0, 0, "array 'x.arr' holds nested arrays", F_K2_ELEM },
	{ "array-elem-type-unknown", F_K2_ELEM, 4, 13, 0, 0, "unknown element type 13", F_K2_ELEM },
	{ "value-type-unknown", F_K1_TYPE, 4, 13, 0, 0, "key 'general.alignment' has unknown value type 13", F_K1_TYPE },
	{ "bool-value-2", F_K3_VAL, 1, 2, 0, 0, "bool key 'x.flg' holds 2", F_K3_VAL },
	{ "key-empty", F_K0_KEY, 8, 0, 0, 0, "kv 0 has an empty key", F_K0_KEY },
	{ "key-duplicate", F_K3_KEY, -1, 0, "x.arr", 5, "duplicate key 'x.arr'", F_K3_KEY },
	{ "key-with-nul", F_K3_KEY, -1, 0, "x\0flg", 5, "contains a NUL byte", F_K3_KEY },
	{ "alignment-wrong-type", F_K1_TYPE, 4, X4_GV_I32, 0, 0, "general.alignment is a i32; it must be a u32", F_K1_VAL },
	{ "alignment-not-pow2", F_K1_VAL, 4, 24, 0, 0, "general.alignment 24 is not a nonzero power of two", F_K1_VAL },
	{ "alignment-zero", F_K1_VAL, 4, 0, 0, 0, "general.alignment 0 is not", F_K1_VAL },
	{ "tensor-name-duplicate", F_T1, -1, 0, "t0", 2, "duplicate tensor name 't0'", F_T1 },
	{ "tensor-name-64-bytes", F_T0, 8, 64, 0, 0, "is 64 bytes long (at most 63)", F_T0 },
	{ "tensor-name-empty", F_T0, 8, 0, 0, 0, "tensor 0 has an empty name", F_T0 },
	{ "n_dims-0", F_T0_ND, 4, 0, 0, 0, "tensor 't0' has n_dims 0", F_T0_ND },
	{ "n_dims-5", F_T0_ND, 4, 5, 0, 0, "tensor 't0' has n_dims 5", F_T0_ND },
	{ "dim-zero", F_T0_DIM1, 8, 0, 0, 0, "tensor 't0' dimension 1 is 0", F_T0_DIM1 },
	{ "dims-overflow", F_T0_DIM1, 8, 1ull << 62, 0, 0, "product of its dimensions overflows", F_T0_DIM1 },
	{ "type-unknown-99", F_T0_TYPE, 4, 99, 0, 0, "tensor 't0' has type id 99", F_T0_TYPE },
	{ "type-unsupported-q4_0", F_T0_TYPE, 4, 2, 0, 0, "type id 2 (Q4_0), which x4 cannot read", F_T0_TYPE },
	{ "ne0-not-block-multiple", F_T0_DIM0, 8, 33, 0, 0, "(IQ4_NL) has ne[0] = 33, not a multiple of the type's 32-element block", F_T0_TYPE },
	{ "offset-misaligned", F_T1_OFF, 8, 40, 0, 0, "tensor 't1' has data offset 40, not a multiple of the alignment 32", F_T1_OFF },
	{ "tensors-overlap", F_T1_OFF, 8, 32, 0, 0, "tensor 't1' (data bytes 32..64) overlaps tensor 't0' (data bytes 0..36)", F_T1_OFF },
	{ "tensor-past-end", F_T1_OFF, 8, 96, 0, 0, "tensor 't1' (F32 [8], 32 bytes at data offset 96) runs past the end of the file (file is 384 bytes, needs 416", F_T1_OFF },
	{ "tensor-offset-2^63", F_T1_OFF, 8, 1ull << 63, 0, 0, "runs past the end of the file", F_T1_OFF },
	{ "tensors-reordered-ok", F_T0_OFF, 8, 32, 0, 0, NULL, 0 }, /* with t1 moved to 0 below */
};

static void mutate(struct img *m, const struct mcase *c)
{
	uint8_t *p = m->b + m->pos[c->field];
	if (c->width > 0)
		for (int i = 0; i < c->width; i++)
			p[i] = (uint8_t)(c->value >> (8 * i));
	else
		memcpy(p + (c->width < 0 ? 8 : 0), c->bytes, c->nbytes);
	if (!strcmp(c->name, "tensors-reordered-ok"))
		memset(m->b + m->pos[F_T1_OFF], 0, 8);
}

/* The message must start with "byte N: " and hold want. */
static void check_fault(const char *name, int rc, const x4_err *e, size_t at, const char *want)
{
	char prefix[40];
	snprintf(prefix, sizeof prefix, "byte %zu: ", at);
	T_OK(rc == X4_EFORMAT && !strncmp(e->msg, prefix, strlen(prefix)) && strstr(e->msg, want),
	     name, "rc %d, message '%s' (wanted '%s' at byte %zu)", rc, rc ? e->msg : "", want, at);	if (rc)
		printf("#   %s\n", e->msg); /* the log shows each message, for review */
}

static void test_table(void)
{
	struct img base;
	base_image(&base);
	x4_gguf *g;
	x4_err e = { 0 };
	int rc = x4_gguf_open_mem(&g, base.b, base.n, &e);
	T_OK(rc == 0 && x4_gguf_tensor_count(g) == 2 && x4_gguf_kv_count(g) == 5 &&
	     x4_gguf_data_offset(g) == base.pos[F_DATA], "base-image-opens", "rc %d: %s", rc, e.msg);
	if (!rc)
		x4_gguf_close(g);
	for (size_t i = 0; i < X4_ARRAY_LEN(mcases); i++) {
		const struct mcase *c = &mcases[i];
		struct img m = base;
		mutate(&m, c);
		rc = x4_gguf_open_mem(&g, m.b, m.n, &e);
		if (!c->want) {
			T_OK(rc == 0, c->name, "rc %d: %s", rc, e.msg);
			if (!rc) {
				walk(g);
				x4_gguf_close(g);
			}
			continue;
		}
		check_fault(c->name, rc, &e, m.pos[c->at], c->want);
		if (!rc)
			x4_gguf_close(g);
	}
}

/* Where a file cut at `cut` bytes must fail: the count bound (each tensor
 * info >= 33 bytes, each kv >= 14) fires before any record is read. */
static size_t cut_fault_at(const struct img *m, size_t cut)
{
	if (cut < 4)
		return 0;
	if (cut < 8)
		return 4;
	if (cut < 16)
		return 8;
	if (cut < 24)
		return 16;
	if (cut - 24 < 2 * 33)
		return 8;
	if (cut - 24 - 2 * 33 < 5 * 14)
		return 16;
	return cut;
}

static void test_truncation(void)
{
	struct img m;
	base_image(&m);
	static const struct { const char *name; int field; } cuts[] = {
		{ "truncated-in-magic", F_MAGIC }, { "truncated-at-version", F_VERSION },
		{ "truncated-at-tensor-count", F_NT }, { "truncated-at-kv-count", F_NKV },
		{ "truncated-at-kv0-key", F_K0_KEY }, { "truncated-at-kv0-value", F_K0_VAL },
		{ "truncated-at-kv1-type", F_K1_TYPE }, { "truncated-at-kv1-value", F_K1_VAL },
		{ "truncated-at-kv2-elem-type", F_K2_ELEM }, { "truncated-at-kv2-count", F_K2_COUNT },
		{ "truncated-at-kv3-key", F_K3_KEY }, { "truncated-at-kv3-value", F_K3_VAL },
		{ "truncated-at-tensor0-info", F_T0 }, { "truncated-at-tensor0-n_dims", F_T0_ND },
		{ "truncated-at-tensor0-dims", F_T0_DIM0 }, { "truncated-at-tensor0-type", F_T0_TYPE },
		{ "truncated-at-tensor0-offset", F_T0_OFF }, { "truncated-at-tensor1-info", F_T1 },
		{ "truncated-at-tensor1-offset", F_T1_OFF }, { "truncated-in-padding", F_END_INFO },
		{ "truncated-at-data", F_DATA },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(cuts); i++) {
		size_t cut = m.pos[cuts[i].field] + (cuts[i].field == F_MAGIC ? 2 : 0);
		size_t at = cut_fault_at(&m, cut);
		if (cuts[i].field == F_DATA)
			at = m.pos[F_T0_OFF]; /* t0 is the first tensor found past the end */
		x4_gguf *g;
		x4_err e = { 0 };
		int rc = x4_gguf_open_mem(&g, m.b, cut, &e);
		check_fault(cuts[i].name, rc, &e, at, "truncated");
		if (!rc)
			x4_gguf_close(g);
	}
}

/* Every length short of the last tensor byte must fail cleanly and say so
 * (a cut inside the last tensor's trailing padding loses nothing). */
static void truncate_every_length(const char *name, const uint8_t *b, size_t n)
{
	x4_gguf *g0;
	x4_err e0;
	if (!x4_gguf_open_mem(&g0, b, n, &e0)) {
		int64_t last = x4_gguf_tensor_count(g0) - 1;
		if (last >= 0) {
			const x4_gguf_tensor *t = x4_gguf_tensor_at(g0, last);
			n = (size_t)(x4_gguf_data_offset(g0) + t->offset + t->nbytes);
		}
		x4_gguf_close(g0);
	}
	size_t bad = SIZE_MAX;
	x4_err e = { 0 };
	int rc = 0;
	for (size_t cut = 0; cut < n && bad == SIZE_MAX; cut++) {
		uint8_t *copy = malloc(cut ? cut : 1); /* a tight buffer, so a stray read is a real overrun */
		memcpy(copy, b, cut);
		x4_gguf *g;
		rc = x4_gguf_open_mem(&g, copy, cut, &e);
		if (rc != X4_EFORMAT || !strstr(e.msg, "truncated"))
			bad = cut;
		if (!rc)
			x4_gguf_close(g);
		free(copy);
	}
	T_OK(bad == SIZE_MAX, name, "cut at %zu of %zu: rc %d, '%s'", bad, n, rc, rc ? e.msg : "");
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void flip_loop(const char *name, const uint8_t *b, size_t n, int iters)
{
	uint8_t *copy = malloc(n);
	int ok = 0, fmt = 0, other = 0;
	char first_other[X4_ERR_MSG + 32] = "";
	for (int it = 0; it < iters; it++) {
		memcpy(copy, b, n);
		int flips = 1 + (int)(rng() % 4);
		for (int f = 0; f < flips; f++) {
			size_t at = rng() % n;
			/* Half the time a whole new byte; else a boundary value a
			 * count or length would choke on. */
			static const uint8_t special[] = { 0, 1, 0x7f, 0x80, 0xff };
			copy[at] = rng() & 1 ? (uint8_t)rng() : special[rng() % 5];
		}
		x4_gguf *g;
		x4_err e = { 0 };
		int rc = x4_gguf_open_mem(&g, copy, n, &e);
		if (rc == 0) {
			walk(g);
			x4_gguf_close(g);
			ok++;
		} else if (rc == X4_EFORMAT && !strncmp(e.msg, "byte ", 5)) {
			fmt++;
		} else {
			if (!other++)
				snprintf(first_other, sizeof first_other, "rc %d: %s", rc, e.msg);
		}
	}
	free(copy);
	T_OK(other == 0, name, "%d of %d flips gave neither success nor a 'byte N:' format error (first: %s)",
	     other, iters, first_other);
	printf("# %s: %d opened, %d rejected\n", name, ok, fmt);
}

/* ---- (a) the writer round trip ---- */

struct rt_tensor {
	const char *name;
	int type, n_dims;
	uint64_t ne[4];
};

static const struct rt_tensor rt_tensors[] = {
	{ "a.f32", X4_T_F32, 1, { 7 } },
	{ "b.f16", X4_T_F16, 2, { 3, 5 } },
	{ "c.bf16", X4_T_BF16, 3, { 5, 3, 2 } },
	{ "d.q8_0", X4_T_Q8_0, 2, { 64, 3 } },
	{ "e.q4_k", X4_T_Q4_K, 1, { 256 } },
	{ "f.q6_k", X4_T_Q6_K, 2, { 256, 2 } },
	{ "g.iq4_nl", X4_T_IQ4_NL, 4, { 32, 3, 1, 2 } },
	{ "h.name.that.is.exactly.sixty.three.bytes.long.for.the.limit.xxx", X4_T_F32, 1, { 1 } },
};
#define RT_N ((int)X4_ARRAY_LEN(rt_tensors))

static uint8_t pattern(int t, uint64_t i) { return (uint8_t)(i * 31 + (uint64_t)t * 7 + 1); }

struct wjob {
	x4_gguf_writer *w;
	uint64_t nbytes[RT_N];
	int fails;
};

/* Job i writes chunk i/RT_N of tensor i%RT_N in 5-byte pieces, so that
 * threads interleave writes to every tensor. */
static void write_job(void *arg, int64_t i)
{
	struct wjob *j = arg;
	int t = (int)(i % RT_N);
	uint64_t chunk = (uint64_t)(i / RT_N), per = (j->nbytes[t] + 3) / 4;
	uint64_t lo = chunk * per, hi = X4_MIN(lo + per, j->nbytes[t]);
	for (uint64_t at = lo; at < hi; at += 5) {
		uint8_t buf[5];
		size_t n = (size_t)X4_MIN((uint64_t)5, hi - at);
		for (size_t k = 0; k < n; k++)
			buf[k] = pattern(t, at + k);
		x4_err e;
		if (x4_gguf_writer_pwrite(j->w, t, at, buf, n, &e))
			__atomic_fetch_add(&j->fails, 1, __ATOMIC_RELAXED);
	}
}

static int count_entries(const char *dir, const char *needle)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += strstr(de->d_name, needle) != NULL;
	if (d)
		closedir(d);
	return n;
}

static const char *const rt_strs[] = { "", "a", "\xe2\x96\x81hello", "<0x0A>", "x y z" };
static const float rt_f32[] = { 0.0f, -1.5f, 3.25e-7f, 65504.0f };
static const int32_t rt_i32[] = { 1, -2, 2147483647, -2147483647 - 1, 6 };

static int write_rt(const char *path, uint32_t align, x4_err *e)
{
	x4_gguf_writer *w;
	int rc = x4_gguf_writer_open(&w, path, e);
	if (rc)
		return rc;
	x4_gguf_writer_kv_str(w, "general.architecture", "xing4_0");
	if (align)
		x4_gguf_writer_kv_u32(w, "general.alignment", align);
	x4_gguf_writer_kv_u32(w, "k.u32", 4000000000u);
	x4_gguf_writer_kv_i32(w, "k.i32", -7);
	x4_gguf_writer_kv_u64(w, "k.u64", 1ull << 40);
	x4_gguf_writer_kv_f32(w, "k.f32", 0.14467963f);
	x4_gguf_writer_kv_bool(w, "k.true", true);
	x4_gguf_writer_kv_bool(w, "k.false", false);
	x4_gguf_writer_kv_str(w, "k.empty", "");
	x4_gguf_writer_kv_arr_str(w, "k.strs", rt_strs, X4_ARRAY_LEN(rt_strs));
	x4_gguf_writer_kv_arr_f32(w, "k.f32s", rt_f32, X4_ARRAY_LEN(rt_f32));
	x4_gguf_writer_kv_arr_i32(w, "k.i32s", rt_i32, X4_ARRAY_LEN(rt_i32));
	x4_gguf_writer_kv_arr_i32(w, "k.none", NULL, 0);
	struct wjob j = { .w = w };
	for (int t = 0; t < RT_N; t++)
		x4_gguf_writer_tensor(w, rt_tensors[t].name, rt_tensors[t].type, rt_tensors[t].n_dims,
				      rt_tensors[t].ne);
	if ((rc = x4_gguf_writer_begin_data(w, e))) {
		x4_gguf_writer_abort(w);
		return rc;
	}
	for (int t = 0; t < RT_N; t++)
		j.nbytes[t] = x4_gguf_writer_tensor_bytes(w, t);
	x4_parallel_for(4 * RT_N, 4, write_job, &j);
	if (j.fails) {
		x4_gguf_writer_abort(w);
		return x4_err_set(e, X4_EIO, "%d pwrites failed", j.fails);
	}
	return x4_gguf_writer_finish(w, e);
}

/* Checks one written file against what write_rt declared. */
static void check_rt(const char *tag, const char *path, uint32_t align)
{
	char name[96];
	x4_gguf *g;
	x4_err e = { 0 };
	int rc = x4_gguf_open(&g, path, &e);
	snprintf(name, sizeof name, "roundtrip-%s-opens", tag);
	T_OK(rc == 0, name, "%s", e.msg);
	if (rc)
		return;
	uint32_t a = align ? align : 32;
	uint64_t u, n, len;
	int64_t v;
	double f;
	bool b;
	const char *s;
	int et;
	const void *data;
	int bad = 0;
	char why[256] = "";
#define KV_CHECK(cond, ...) do { if (!(cond) && !bad++) snprintf(why, sizeof why, __VA_ARGS__); } while (0)
	KV_CHECK(x4_gguf_version(g) == 3 && x4_gguf_alignment(g) == a, "version %u alignment %u",
		 x4_gguf_version(g), x4_gguf_alignment(g));
	KV_CHECK(x4_gguf_kv_count(g) == 12 + (align != 0), "kv count %" PRId64, x4_gguf_kv_count(g));
	KV_CHECK(!x4_gguf_get_str(g, "general.architecture", &s, &len, &e) && len == 7 &&
		 !memcmp(s, "xing4_0", 7), "architecture");
	KV_CHECK(!x4_gguf_get_u64(g, "k.u32", &u, &e) && u == 4000000000u, "k.u32");
	KV_CHECK(x4_gguf_kv_type(g, x4_gguf_find_kv(g, "k.u32")) == X4_GV_U32, "k.u32 type");
	KV_CHECK(!x4_gguf_get_i64(g, "k.u32", &v, &e) && v == 4000000000, "k.u32 as i64");
	KV_CHECK(!x4_gguf_get_i64(g, "k.i32", &v, &e) && v == -7, "k.i32");
	KV_CHECK(x4_gguf_kv_type(g, x4_gguf_find_kv(g, "k.i32")) == X4_GV_I32, "k.i32 type");
	KV_CHECK(!x4_gguf_get_u64(g, "k.u64", &u, &e) && u == 1ull << 40, "k.u64");
	KV_CHECK(x4_gguf_kv_type(g, x4_gguf_find_kv(g, "k.u64")) == X4_GV_U64, "k.u64 type");
	KV_CHECK(!x4_gguf_get_f64(g, "k.f32", &f, &e) && (float)f == 0.14467963f, "k.f32");
	KV_CHECK(x4_gguf_kv_type(g, x4_gguf_find_kv(g, "k.f32")) == X4_GV_F32, "k.f32 type");
	KV_CHECK(!x4_gguf_get_bool(g, "k.true", &b, &e) && b, "k.true");
	KV_CHECK(!x4_gguf_get_bool(g, "k.false", &b, &e) && !b, "k.false");
	KV_CHECK(!x4_gguf_get_str(g, "k.empty", &s, &len, &e) && len == 0, "k.empty");
	int64_t ki = x4_gguf_find_kv(g, "k.strs");
	KV_CHECK(!x4_gguf_kv_arr(g, ki, &et, &n, &data) && et == X4_GV_STR &&
		 n == X4_ARRAY_LEN(rt_strs), "k.strs shape");
	for (uint64_t k = 0; k < X4_ARRAY_LEN(rt_strs); k++)
		KV_CHECK(!x4_gguf_kv_arr_str(g, ki, k, &s, &len) && len == strlen(rt_strs[k]) &&
			 !memcmp(s, rt_strs[k], len), "k.strs[%" PRIu64 "]", k);
	KV_CHECK(x4_gguf_kv_arr_str(g, ki, X4_ARRAY_LEN(rt_strs), &s, &len) == X4_EINVAL, "k.strs[n]");
	ki = x4_gguf_find_kv(g, "k.f32s");
	KV_CHECK(!x4_gguf_kv_arr(g, ki, &et, &n, &data) && et == X4_GV_F32 && n == 4 &&
		 !memcmp(data, rt_f32, sizeof rt_f32), "k.f32s");
	ki = x4_gguf_find_kv(g, "k.i32s");
	KV_CHECK(!x4_gguf_kv_arr(g, ki, &et, &n, &data) && et == X4_GV_I32 && n == 5 &&
		 !memcmp(data, rt_i32, sizeof rt_i32), "k.i32s");
	ki = x4_gguf_find_kv(g, "k.none");
	KV_CHECK(!x4_gguf_kv_arr(g, ki, &et, &n, &data) && et == X4_GV_I32 && n == 0, "k.none");
	if (align)
		KV_CHECK(!x4_gguf_get_u64(g, "general.alignment", &u, &e) && u == align, "alignment key");
	snprintf(name, sizeof name, "roundtrip-%s-keys", tag);
	T_OK(!bad, name, "%d mismatches, first: %s", bad, why);

	bad = 0;
	uint64_t off = 0, d0 = x4_gguf_data_offset(g);
	const uint8_t *base = x4_gguf_base(g);
	KV_CHECK(x4_gguf_tensor_count(g) == RT_N, "tensor count %" PRId64, x4_gguf_tensor_count(g));
	KV_CHECK(d0 % a == 0, "data offset %" PRIu64 " not aligned to %u", d0, a);
	for (int t = 0; t < RT_N && t < x4_gguf_tensor_count(g); t++) {
		const struct rt_tensor *r = &rt_tensors[t];
		const x4_gguf_tensor *x = x4_gguf_tensor_at(g, t);
		uint64_t ne = 1;
		for (int d = 0; d < 4; d++)
			ne *= d < r->n_dims ? r->ne[d] : 1;
		uint64_t nb = x4_type_bytes(r->type, ne);
		KV_CHECK(!strcmp(x->name, r->name) && x->type == r->type && x->n_dims == r->n_dims &&
			 x->n_elems == ne && x->nbytes == nb && x4_gguf_find_tensor(g, r->name) == x,
			 "tensor %d: %s type %d n_dims %d nbytes %" PRIu64, t, x->name, x->type,
			 x->n_dims, x->nbytes);
		for (int d = 0; d < 4; d++)
			KV_CHECK(x->ne[d] == (d < r->n_dims ? r->ne[d] : 1), "tensor %d ne[%d]", t, d);
		KV_CHECK(x->offset == off, "tensor %d offset %" PRIu64 ", strict layout wants %" PRIu64,
			 t, x->offset, off);
		KV_CHECK(x->data == base + d0 + off, "tensor %d data pointer", t);
		for (uint64_t i = 0; i < nb && x->offset == off; i++)
			KV_CHECK(base[d0 + off + i] == pattern(t, i), "tensor %d byte %" PRIu64, t, i);
		uint64_t padded = (nb + a - 1) / a * a;
		for (uint64_t i = nb; i < padded; i++)
			KV_CHECK(base[d0 + off + i] == 0, "tensor %d padding byte %" PRIu64, t, i);
		off += padded;
	}
	KV_CHECK(x4_gguf_file_size(g) == d0 + off, "file is %" PRIu64 " bytes, wanted %" PRIu64,
		 x4_gguf_file_size(g), d0 + off);
	snprintf(name, sizeof name, "roundtrip-%s-tensors", tag);
	T_OK(!bad, name, "%d mismatches, first: %s", bad, why);
#undef KV_CHECK

	/* Getter errors name the key and both types. */
	rc = x4_gguf_get_str(g, "k.u32", &s, &len, &e);
	snprintf(name, sizeof name, "roundtrip-%s-getter-mismatch", tag);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "'k.u32' is a u32, expected a string"), name, "rc %d '%s'", rc, e.msg);
	rc = x4_gguf_get_u64(g, "k.i32", &u, &e);
	snprintf(name, sizeof name, "roundtrip-%s-getter-negative", tag);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "'k.i32' holds -7"), name, "rc %d '%s'", rc, e.msg);
	rc = x4_gguf_get_u64(g, "k.missing", &u, &e);
	snprintf(name, sizeof name, "roundtrip-%s-getter-missing", tag);
	T_OK(rc == X4_ENOTFOUND && strstr(e.msg, "k.missing"), name, "rc %d '%s'", rc, e.msg);
	x4_gguf_close(g);
}

static void test_writer(const char *dir)
{
	char path[512], path64[512], p2[512];
	x4_err e = { 0 };
	snprintf(path, sizeof path, "%s/rt.gguf", dir);
	int rc = write_rt(path, 0, &e);
	T_OK(rc == 0, "roundtrip-write", "%s", e.msg);
	check_rt("default-align", path, 0);
	snprintf(path64, sizeof path64, "%s/rt64.gguf", dir);
	rc = write_rt(path64, 64, &e);
	T_OK(rc == 0, "roundtrip-write-align64", "%s", e.msg);
	check_rt("align64", path64, 64);
	T_OK(count_entries(dir, ".tmp.") == 0, "roundtrip-no-tmp-left", "a .tmp. file remains in %s", dir);

	/* The written file, cut at every length and flipped at random. */
	FILE *fp = fopen(path, "rb");
	static uint8_t buf[8192];
	size_t n = fp ? fread(buf, 1, sizeof buf, fp) : 0;
	if (fp)
		fclose(fp);
	truncate_every_length("written-file-truncated-at-every-length", buf, n);
	flip_loop("written-file-random-flips", buf, n, 3000);

	/* Abort after some data: nothing remains. */
	snprintf(p2, sizeof p2, "%s/aborted.gguf", dir);
	x4_gguf_writer *w;
	rc = x4_gguf_writer_open(&w, p2, &e);
	uint64_t ne[1] = { 64 };
	int ti = x4_gguf_writer_tensor(w, "t", X4_T_F32, 1, ne);
	rc = rc ? rc : x4_gguf_writer_begin_data(w, &e);
	int tmp_during = count_entries(dir, "aborted.gguf.tmp.");
	uint8_t zero[16] = { 0 };
	rc = rc ? rc : x4_gguf_writer_pwrite(w, ti, 0, zero, sizeof zero, &e);
	x4_gguf_writer_abort(w);
	T_OK(rc == 0 && tmp_during == 1 && count_entries(dir, "aborted") == 0, "writer-abort-leaves-nothing",
	     "rc %d (%s), tmp files during %d, after %d", rc, e.msg, tmp_during, count_entries(dir, "aborted"));

	/* Writer faults: latched at declaration, reported by begin_data. */
	static const struct {
		const char *name, *key, *tname, *want;
		int type, n_dims;
		uint64_t ne0;
		uint32_t align;
	} wf[] = {
		{ "writer-duplicate-key", "k", "t", "duplicate key 'k'", X4_T_F32, 1, 8, 0 },
		{ "writer-empty-key", "", "t", "empty key", X4_T_F32, 1, 8, 0 },
		{ "writer-alignment-not-pow2", NULL, "t", "general.alignment 48 is not", X4_T_F32, 1, 8, 48 },
		{ "writer-tensor-name-64", NULL, "0123456789012345678901234567890123456789012345678901234567890123", "is 64 bytes", X4_T_F32, 1, 8, 0 },
		{ "writer-tensor-type-unknown", NULL, "t", "type 99", 99, 1, 8, 0 },
		{ "writer-tensor-ne0-not-block", NULL, "t", "ne[0] = 33", X4_T_IQ4_NL, 1, 33, 0 },
		{ "writer-tensor-n_dims-5", NULL, "t", "n_dims 5", X4_T_F32, 5, 8, 0 },
		{ "writer-tensor-dim-zero", NULL, "t", "dimension 0 (0)", X4_T_F32, 1, 0, 0 },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(wf); i++) {
		snprintf(p2, sizeof p2, "%s/wf%zu.gguf", dir, i);
		rc = x4_gguf_writer_open(&w, p2, &e);
		if (rc)
			break;
		x4_gguf_writer_kv_u32(w, "k", 1);
		if (wf[i].key)
			x4_gguf_writer_kv_u32(w, wf[i].key, 2);
		if (wf[i].align)
			x4_gguf_writer_kv_u32(w, "general.alignment", wf[i].align);
		uint64_t dims[5] = { wf[i].ne0, 1, 1, 1, 1 };
		x4_gguf_writer_tensor(w, wf[i].tname, wf[i].type, wf[i].n_dims, dims);
		rc = x4_gguf_writer_begin_data(w, &e);
		x4_gguf_writer_abort(w);
		T_OK(rc == X4_EINVAL && strstr(e.msg, wf[i].want) && count_entries(dir, "wf") == 0,
		     wf[i].name, "rc %d '%s'", rc, e.msg);
	}

	/* A tensor left short, and a pwrite out of bounds. */
	snprintf(p2, sizeof p2, "%s/short.gguf", dir);
	rc = x4_gguf_writer_open(&w, p2, &e);
	ti = x4_gguf_writer_tensor(w, "t", X4_T_F32, 1, ne);
	rc = rc ? rc : x4_gguf_writer_begin_data(w, &e);
	int oob = x4_gguf_writer_pwrite(w, ti, 250, zero, 16, &e);
	T_OK(oob == X4_EINVAL && strstr(e.msg, "run past the end of tensor 't'"), "writer-pwrite-out-of-bounds",
	     "rc %d '%s'", oob, e.msg);
	rc = rc ? rc : x4_gguf_writer_pwrite(w, ti, 0, zero, 16, &e);
	int fin = x4_gguf_writer_finish(w, &e);
	T_OK(rc == 0 && fin == X4_EINVAL && strstr(e.msg, "got 16 of its 256 bytes") &&
	     count_entries(dir, "short") == 0, "writer-short-tensor-fails-finish", "rc %d fin %d '%s'",
	     rc, fin, e.msg);
}

static void test_open_files(const char *dir)
{
	char path[512];
	x4_gguf *g;
	x4_err e = { 0 };
	snprintf(path, sizeof path, "%s/nope.gguf", dir);
	int rc = x4_gguf_open(&g, path, &e);
	T_OK(rc == X4_ENOTFOUND && strstr(e.msg, path), "open-missing-file", "rc %d '%s'", rc, e.msg);
	rc = x4_gguf_open(&g, dir, &e);
	T_OK(rc == X4_EIO && strstr(e.msg, "not a regular file"), "open-directory", "rc %d '%s'", rc, e.msg);
	snprintf(path, sizeof path, "%s/empty.gguf", dir);
	FILE *fp = fopen(path, "wb");
	if (fp)
		fclose(fp);
	rc = x4_gguf_open(&g, path, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, path) && strstr(e.msg, "byte 0: truncated"), "open-empty-file",
	     "rc %d '%s'", rc, e.msg);
	unlink(path);
	snprintf(path, sizeof path, "%s/elf.gguf", dir);
	fp = fopen(path, "wb");
	if (fp) {
		fwrite("\x7f" "ELF\x02\x01\x01\0\0\0\0\0", 1, 12, fp);
		fclose(fp);
	}
	rc = x4_gguf_open(&g, path, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "not a GGUF file: the first 4 bytes are 7f 45 4c 46"),
	     "open-elf-file", "rc %d '%s'", rc, e.msg);
	unlink(path);
}

static int write_file(const char *path, const void *b, size_t n)
{
	FILE *fp = fopen(path, "wb");
	if (!fp)
		return -1;
	size_t w = fwrite(b, 1, n, fp);
	return fclose(fp) || w != n ? -1 : 0;
}

/* The fuzz seeds: the hand-laid image, its version-2 twin, and a writer
 * file with every key type. */
static int write_seeds(const char *dir)
{
	char path[512];
	struct img m;
	base_image(&m);
	snprintf(path, sizeof path, "%s/hand.gguf", dir);
	if (write_file(path, m.b, m.n))
		return 1;
	m.b[m.pos[F_VERSION]] = 2;
	snprintf(path, sizeof path, "%s/hand-v2.gguf", dir);
	if (write_file(path, m.b, m.n))
		return 1;
	x4_err e = { 0 };
	snprintf(path, sizeof path, "%s/written.gguf", dir);
	if (write_rt(path, 0, &e)) {
		fprintf(stderr, "test_gguf: %s\n", e.msg);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--write-seeds"))
		return write_seeds(argv[2]);
	char dir[] = "/tmp/x4-test-gguf-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_table();
	test_truncation();
	struct img m;
	base_image(&m);
	truncate_every_length("hand-image-truncated-at-every-length", m.b, m.n);
	flip_loop("hand-image-random-flips", m.b, m.n, 3000);
	test_writer(dir);
	test_open_files(dir);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "test_gguf: could not remove %s\n", dir);
	return t_done();
}
