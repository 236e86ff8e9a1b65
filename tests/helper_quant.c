/*
 * helper_quant.c - lets tests/oracle_quant.py run x4's block code on files:
 *   helper_quant dequant TYPE IN.bin OUT.f32   raw blocks -> raw float32
 *   helper_quant quant   TYPE IN.f32 OUT.bin   raw float32 -> raw blocks
 * TYPE is a ggml type name (IQ4_NL) or id (20).  Exit 0 ok, 1 failure, 2 usage.
 */
#include "x4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_type(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (*s && !*end && !errno && v >= 0 && v < 1000)
		return (int)v;
	for (int t = 0; t < 64; t++)
		if (strcmp(x4_type_name(t), s) == 0)
			return t;
	return -1;
}

static void *read_all(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, len = 0;
	unsigned char *buf = malloc(cap);
	while (buf) {
		len += fread(buf + len, 1, cap - len, f);
		if (len < cap)
			break;
		unsigned char *nb = realloc(buf, cap *= 2);
		if (!nb)
			free(buf);
		buf = nb;
	}
	if (ferror(f)) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*n = len;
	return buf;
}

static int write_all(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(p, 1, n, f);
	return (fclose(f) == 0 && w == n) ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[1], "dequant") && strcmp(argv[1], "quant"))) {
		fprintf(stderr, "usage: helper_quant dequant|quant TYPE IN OUT\n");
		return 2;
	}
	int type = parse_type(argv[2]);
	if (!x4_type_known(type)) {
		fprintf(stderr, "helper_quant: unknown type '%s'\n", argv[2]);
		return 2;
	}
	size_t len;
	void *in = read_all(argv[3], &len);
	if (!in) {
		fprintf(stderr, "helper_quant: cannot read %s\n", argv[3]);
		return 1;
	}
	x4_err e = { 0 };
	uint64_t be = (uint64_t)x4_type_block_elems(type);
	uint64_t bb = (uint64_t)x4_type_block_bytes(type);
	void *out;
	size_t out_len;
	int rc;
	if (!strcmp(argv[1], "dequant")) {
		if (len % bb) {
			fprintf(stderr, "helper_quant: %s: %zu bytes is not whole %s blocks\n",
				argv[3], len, x4_type_name(type));
			return 1;
		}
		uint64_t n = len / bb * be;
		out_len = n * sizeof(float);
		out = malloc(out_len ? out_len : 1);
		rc = out ? x4_dequant(type, in, out, n, &e) : X4_ENOMEM;
	} else {
		uint64_t n = len / sizeof(float);
		out_len = x4_type_bytes(type, n);
		out = malloc(out_len ? out_len : 1);
		rc = out ? x4_quant(type, in, out, n, &e) : X4_ENOMEM;
	}
	if (rc) {
		fprintf(stderr, "helper_quant: %s\n", rc == X4_ENOMEM ? "out of memory" : e.msg);
		return 1;
	}
	if (write_all(argv[4], out, out_len)) {
		fprintf(stderr, "helper_quant: cannot write %s\n", argv[4]);
		return 1;
	}
	free(in);
	free(out);
	return 0;
}
