/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader: `make fuzz`
 * (FUZZ_SECONDS=60) builds it with ASan and UBSan and runs it from the
 * seeds in tests/fuzz-seeds/.
 *
 * The input is copied into a buffer of exactly its size, so any read past
 * the end is an ASan report.  An accepted file is walked completely: every
 * getter on every key, every array element, every tensor byte.
 */
#include "x4.h"

#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

static void walk(const x4_gguf *g)
{
	uint64_t h = x4_gguf_version(g) + x4_gguf_alignment(g) + x4_gguf_data_offset(g) +
		     x4_gguf_file_size(g);
	x4_err e;
	for (int64_t i = 0; i < x4_gguf_kv_count(g); i++) {
		const char *key = x4_gguf_kv_key(g, i), *s;
		uint64_t u, n, len;
		int64_t v;
		double f;
		bool b;
		int et;
		const void *data;
		if (x4_gguf_find_kv(g, key) != i)
			abort(); /* keys are unique, so lookup must find this one */
		h += strlen(key) + (uint64_t)x4_gguf_kv_type(g, i);
		h += strlen(x4_gguf_vtype_name(x4_gguf_kv_type(g, i)));
		if (!x4_gguf_get_u64(g, key, &u, &e)) h += u;
		if (!x4_gguf_get_i64(g, key, &v, &e)) h += (uint64_t)v;
		if (!x4_gguf_get_f64(g, key, &f, &e)) h += f == f;
		if (!x4_gguf_get_bool(g, key, &b, &e)) h += b;
		if (!x4_gguf_get_str(g, key, &s, &len, &e))
			for (uint64_t k = 0; k < len; k++)
				h += (uint8_t)s[k];
		if (!x4_gguf_kv_u64(g, i, &u)) h += u;
		if (!x4_gguf_kv_i64(g, i, &v)) h += (uint64_t)v;
		if (!x4_gguf_kv_f64(g, i, &f)) h += f == f;
		if (!x4_gguf_kv_str(g, i, &s, &len)) h += len;
		if (x4_gguf_kv_arr(g, i, &et, &n, &data))
			continue;
		static const int width[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
		for (uint64_t j = 0; j < n; j++) {
			if (et == X4_GV_STR) {
				if (x4_gguf_kv_arr_str(g, i, j, &s, &len))
					abort();
				for (uint64_t k = 0; k < len; k++)
					h += (uint8_t)s[k];
			} else {
				for (int k = 0; k < width[et]; k++)
					h += ((const uint8_t *)data)[j * width[et] + k];
			}
		}
	}
	for (int64_t i = 0; i < x4_gguf_tensor_count(g); i++) {
		const x4_gguf_tensor *t = x4_gguf_tensor_at(g, i);
		if (x4_gguf_find_tensor(g, t->name) != t)
			abort();
		h += strlen(t->name) + (uint64_t)t->type + t->n_elems + t->offset;
		for (uint64_t j = 0; j < t->nbytes; j++)
			h += ((const uint8_t *)t->data)[j];
	}
	sink = h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	x4_gguf *g;
	x4_err e;
	int rc = x4_gguf_open_mem(&g, copy, size, &e);
	if (rc == 0) {
		walk(g);
		x4_gguf_close(g);
	} else if (rc != X4_EFORMAT || strncmp(e.msg, "byte ", 5)) {
		abort(); /* every fault of a buffer is a format error naming its byte */
	}
	free(copy);
	return 0;
}
