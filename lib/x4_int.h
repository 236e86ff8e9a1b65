/*
 * x4_int.h - helpers shared inside lib/ (never included by cmd/).
 */
#ifndef X4_INT_H
#define X4_INT_H

#include "x4.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define X4_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define X4_MIN(a, b) ((a) < (b) ? (a) : (b))
#define X4_MAX(a, b) ((a) > (b) ? (a) : (b))

/* malloc that records X4_ENOMEM with what it was for. */
void *x4_alloc(size_t n, const char *what, x4_err *e);
void *x4_calloc(size_t n, size_t size, const char *what, x4_err *e);

/* 64-bit mixing hash used by the fingerprint (seeded, streaming). */
typedef struct x4_hash {
	uint64_t h;
	uint64_t n;
} x4_hash;
void x4_hash_init(x4_hash *s, uint64_t seed);
void x4_hash_update(x4_hash *s, const void *data, size_t n);
uint64_t x4_hash_final(const x4_hash *s);

#endif
