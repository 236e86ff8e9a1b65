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
/* The cache's positions when --max-model-len is not given: min(the trained
 * context, this).  4096 covers every test and benchmark prompt while a
 * full-size cache (46,080 bytes a position) stays under 200 MiB. */
#define X4_DEFAULT_CTX 4096

/* malloc that records X4_ENOMEM with what it was for. */
void *x4_alloc(size_t n, const char *what, x4_err *e);
void *x4_calloc(size_t n, size_t size, const char *what, x4_err *e);

/* 0 if s[0..n) is one JSON value (RFC 8259) with nothing but white space
 * around it; else -1 with the byte offset where it stops being JSON and
 * why (lib/util/json.c). */
int x4_json_check(const char *s, size_t n, size_t *at, const char **why);

/* 64-bit mixing hash used by the fingerprint (seeded, streaming). */
typedef struct x4_hash {
	uint64_t h;
	uint64_t n;
} x4_hash;
void x4_hash_init(x4_hash *s, uint64_t seed);
void x4_hash_update(x4_hash *s, const void *data, size_t n);
uint64_t x4_hash_final(const x4_hash *s);

/* The generator behind the sampler and x4-synth: splitmix64 spreads a seed
 * over xoshiro256**'s state, xoshiro256** draws.  Inline because x4-synth
 * draws one number per few weights of a full-size checkpoint.  Changing
 * either changes every seeded run's output. */
static inline uint64_t x4_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t x4_rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t x4_xoshiro_next(uint64_t s[4])
{
	uint64_t r = x4_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = x4_rotl64(s[3], 45);
	return r;
}

/* The sampler's option check, shared by the host sampler and the session. */
int x4_sampler_check(const x4_sampler_opts *o, x4_err *e);
/* Greedy: temperature 0 or top-k 1 (the argmax, no draw). */
bool x4_sampler_greedy(const x4_sampler_opts *o);

#endif
