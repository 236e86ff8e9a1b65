/*
 * gguf_int.h - what the GGUF reader (lib/gguf/gguf.c, which parses and checks)
 * and its getters (lib/gguf/gguf_get.c, which convert and name type mismatches)
 * share: the parsed handle.  Every field here has been checked against the
 * file by the time a getter sees it.
 */
#ifndef X4_GGUF_INT_H
#define X4_GGUF_INT_H

#include "x4_int.h"

struct kv {
	char *key;           /* NUL-terminated copy */
	uint64_t key_at;     /* file offset of the key */
	uint64_t val_at;     /* file offset of the value */
	int type;            /* X4_GV_* */
	int elem;            /* arrays: element type */
	const uint8_t *val;  /* scalar bytes, string bytes, or array elements */
	uint64_t len;        /* string length, or array element count */
	uint64_t *soff;      /* string arrays: [len] file offset of each element */
};

struct tensor {
	x4_gguf_tensor t;
	uint64_t at;     /* file offset of the info record */
	uint64_t off_at; /* file offset of its offset field */
};

struct x4_gguf {
	const uint8_t *base;
	uint64_t size;
	void *map; /* non-NULL when x4_gguf_open mapped the file */
	uint32_t version, align;
	uint64_t data_off;
	int64_t n_kv, n_t;
	struct kv *kv;       /* [n_kv] */
	struct tensor *t;    /* [n_t] */
	int64_t *kv_tab;     /* open-addressing hash of keys: index + 1, 0 empty */
	uint64_t kv_mask;
	int64_t *t_tab;      /* the same for tensor names */
	uint64_t t_mask;
};

/* A little-endian u64 from unaligned bytes. */
static inline uint64_t x4_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

#endif
