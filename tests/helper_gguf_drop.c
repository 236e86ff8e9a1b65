/*
 * helper_gguf_drop - copy a GGUF leaving one named tensor out, through the
 * library's reader and writer (every key and every other tensor's bytes
 * kept), so that tests can hand x4-inspect --check a file with a hole.
 *
 *   build/tests/helper_gguf_drop IN.gguf OUT.gguf TENSOR_NAME
 */
#include "x4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int width[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

/* Strings in the mapping are not NUL-terminated. */
static char *dup_n(const char *s, uint64_t n)
{
	char *p = malloc(n + 1);
	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

/* The writer has typed setters for the kinds a xing4_0 file uses; anything
 * else is refused rather than silently changed. */
static int copy_kv(const x4_gguf *g, int64_t i, x4_gguf_writer *w)
{
	const char *key = x4_gguf_kv_key(g, i);
	int type = x4_gguf_kv_type(g, i);
	uint64_t u;
	int64_t s;
	double d;
	bool b;
	const char *str;
	uint64_t len;
	switch (type) {
	case X4_GV_U32:
		x4_gguf_kv_u64(g, i, &u);
		return x4_gguf_writer_kv_u32(w, key, (uint32_t)u) < 0;
	case X4_GV_I32:
		x4_gguf_kv_i64(g, i, &s);
		return x4_gguf_writer_kv_i32(w, key, (int32_t)s) < 0;
	case X4_GV_U64:
		x4_gguf_kv_u64(g, i, &u);
		return x4_gguf_writer_kv_u64(w, key, u) < 0;
	case X4_GV_F32:
		x4_gguf_kv_f64(g, i, &d);
		return x4_gguf_writer_kv_f32(w, key, (float)d) < 0;
	case X4_GV_BOOL:
		x4_gguf_get_bool(g, key, &b, NULL);
		return x4_gguf_writer_kv_bool(w, key, b) < 0;
	case X4_GV_STR: {
		x4_gguf_kv_str(g, i, &str, &len);
		char *v = dup_n(str, len);
		int rc = !v || x4_gguf_writer_kv_str(w, key, v) < 0;
		free(v);
		return rc;
	}
	case X4_GV_ARR: {
		int et;
		uint64_t n;
		const void *data;
		x4_gguf_kv_arr(g, i, &et, &n, &data);
		if (et == X4_GV_STR) {
			char **v = calloc(n ? n : 1, sizeof *v);
			int rc = !v;
			for (uint64_t j = 0; !rc && j < n; j++) {
				x4_gguf_kv_arr_str(g, i, j, &str, &len);
				rc = !(v[j] = dup_n(str, len));
			}
			rc = rc || x4_gguf_writer_kv_arr_str(w, key, (const char *const *)v, n) < 0;
			for (uint64_t j = 0; v && j < n; j++)
				free(v[j]);
			free(v);
			return rc;
		}
		if (et == X4_GV_F32 || et == X4_GV_I32) {
			void *v = malloc(n * 4 + 1); /* the mapping may be unaligned */
			if (!v)
				return 1;
			memcpy(v, data, n * (uint64_t)width[et]);
			int rc = et == X4_GV_F32 ? x4_gguf_writer_kv_arr_f32(w, key, v, n)
						 : x4_gguf_writer_kv_arr_i32(w, key, v, n);
			free(v);
			return rc < 0;
		}
		break;
	}
	}
	fprintf(stderr, "helper_gguf_drop: key %s has a type (%s) this helper cannot copy\n", key,
		x4_gguf_vtype_name(type));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: helper_gguf_drop IN.gguf OUT.gguf TENSOR_NAME\n");
		return 2;
	}
	x4_err e = { 0 };
	x4_gguf *g;
	if (x4_gguf_open(&g, argv[1], &e)) {
		fprintf(stderr, "helper_gguf_drop: %s\n", e.msg);
		return 1;
	}
	if (!x4_gguf_find_tensor(g, argv[3])) {
		fprintf(stderr, "helper_gguf_drop: %s has no tensor %s\n", argv[1], argv[3]);
		x4_gguf_close(g);
		return 1;
	}
	x4_gguf_writer *w;
	if (x4_gguf_writer_open(&w, argv[2], &e)) {
		fprintf(stderr, "helper_gguf_drop: %s\n", e.msg);
		x4_gguf_close(g);
		return 1;
	}
	int bad = 0;
	for (int64_t i = 0; i < x4_gguf_kv_count(g) && !bad; i++)
		bad = copy_kv(g, i, w);
	int64_t n = x4_gguf_tensor_count(g);
	int *slot = calloc((size_t)n + 1, sizeof *slot); /* file index -> writer index */
	bad = bad || !slot;
	for (int64_t i = 0; i < n && !bad; i++) {
		const x4_gguf_tensor *t = x4_gguf_tensor_at(g, i);
		slot[i] = strcmp(t->name, argv[3]) == 0 ? -1 :
			  x4_gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne);
	}
	if (bad || x4_gguf_writer_begin_data(w, &e)) {
		fprintf(stderr, "helper_gguf_drop: %s\n", bad ? "copying the keys failed" : e.msg);
		x4_gguf_writer_abort(w);
		x4_gguf_close(g);
		free(slot);
		return 1;
	}
	for (int64_t i = 0; i < n && !bad; i++) {
		const x4_gguf_tensor *t = x4_gguf_tensor_at(g, i);
		if (slot[i] >= 0)
			bad = x4_gguf_writer_pwrite(w, slot[i], 0, t->data, t->nbytes, &e) != 0;
	}
	if (bad) {
		x4_gguf_writer_abort(w);
	} else if (x4_gguf_writer_finish(w, &e)) {
		bad = 1;
	}
	if (bad)
		fprintf(stderr, "helper_gguf_drop: %s\n", e.msg);
	free(slot);
	x4_gguf_close(g);
	return bad;
}
