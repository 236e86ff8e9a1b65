/*
 * helper_tok.c - x4's tokenizer for tests/oracle_tok.py to compare with the
 * sentencepiece package.  Every mode builds Xing4's vocabulary of VOCAB_N
 * pieces (x4_vocab_xing4) and its tokenizer (x4_tokenizer_from_vocab).
 *
 *   helper_tok write-model VOCAB_N OUT       the derived tokenizer.model
 *   helper_tok encode-lines VOCAB_N FILE     ids of each line (no '\n'), comma separated
 *   helper_tok encode-special VOCAB_N FILE   the same with X4_TOKENIZE_SPECIAL
 *   helper_tok encode-file VOCAB_N FILE      ids of the whole file as one text
 *   helper_tok decode-lines VOCAB_N FILE     each line of ids -> the text, as hex
 *   helper_tok bench VOCAB_N FILE [REPS]     encoding speed over the file's lines
 */
#include "x4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what, const x4_err *e)
{
	fprintf(stderr, "helper_tok: %s: %s\n", what, e ? e->msg : "failed");
	return 1;
}

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (len == cap)
			buf = realloc(buf, cap *= 2);
		size_t k = fread(buf + len, 1, cap - len, f);
		if (k == 0)
			break;
		len += k;
	}
	fclose(f);
	buf = realloc(buf, len + 1);
	buf[len] = 0;
	*n = len;
	return buf;
}

static void print_ids(const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf(i ? ",%d" : "%d", ids[i]);
	putchar('\n');
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: helper_tok MODE VOCAB_N FILE\n");
		return 2;
	}
	const char *mode = argv[1];
	char *end;
	long nv = strtol(argv[2], &end, 10);
	if (*end || nv <= 0 || nv > 1 << 24) {
		fprintf(stderr, "helper_tok: bad VOCAB_N %s\n", argv[2]);
		return 2;
	}
	x4_err e = { 0 };
	x4_vocab v;
	if (x4_vocab_xing4((int)nv, &v, &e))
		return die("vocabulary", &e);
	if (!strcmp(mode, "write-model")) {
		FILE *f = fopen(argv[3], "wb");
		if (!f || fwrite(v.model, 1, v.model_len, f) != v.model_len || fclose(f))
			return die(argv[3], NULL);
		x4_vocab_free(&v);
		return 0;
	}
	x4_tokenizer *t;
	if (x4_tokenizer_from_vocab(&t, &v, &e))
		return die("tokenizer", &e);
	size_t len;
	char *text = slurp(argv[3], &len);
	if (!text)
		return die(argv[3], NULL);
	int32_t *ids;
	size_t n;
	if (!strcmp(mode, "encode-file")) {
		if (x4_tokenize(t, text, len, 0, &ids, &n, &e))
			return die("tokenize", &e);
		print_ids(ids, n);
		free(ids);
	} else if (!strcmp(mode, "encode-lines") || !strcmp(mode, "encode-special") ||
		   !strcmp(mode, "bench")) {
		unsigned flags = !strcmp(mode, "encode-special") ? X4_TOKENIZE_SPECIAL : 0;
		bool bench = !strcmp(mode, "bench");
		int reps = bench && argc > 4 ? atoi(argv[4]) : 1;
		double best = 1e30;
		size_t ntok = 0;
		for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
			double t0 = x4_now();
			ntok = 0;
			for (size_t p = 0; p < len;) {
				char *nl = memchr(text + p, '\n', len - p);
				size_t l = nl ? (size_t)(nl - (text + p)) : len - p;
				if (x4_tokenize(t, text + p, l, flags, &ids, &n, &e))
					return die("tokenize", &e);
				if (!bench)
					print_ids(ids, n);
				ntok += n;
				free(ids);
				p += l + (nl != NULL);
			}
			double dt = x4_now() - t0;
			best = dt < best ? dt : best;
		}
		if (bench)
			printf("bytes %zu tokens %zu best_s %.4f mb_s %.2f tok_s %.0f\n", len, ntok, best,
			       len / best / 1e6, ntok / best);
	} else if (!strcmp(mode, "decode-lines")) {
		for (char *line = text, *nl; line < text + len; line = nl + 1) {
			nl = strchr(line, '\n');
			if (!nl)
				nl = text + len;
			*nl = 0;
			size_t cap = 16, k = 0;
			int32_t *v2 = malloc(cap * sizeof(*v2));
			for (char *p = line; *p;) {
				if (k == cap)
					v2 = realloc(v2, (cap *= 2) * sizeof(*v2));
				v2[k++] = (int32_t)strtol(p, &p, 10);
				if (*p == ',')
					p++;
				else if (*p)
					return die("decode-lines: bad id list", NULL);
			}
			char *s;
			if (x4_detokenize(t, v2, k, &s, &e))
				return die("detokenize", &e);
			for (char *c = s; *c; c++)
				printf("%02x", (unsigned char)*c);
			putchar('\n');
			free(s);
			free(v2);
		}
	} else {
		fprintf(stderr, "helper_tok: unknown mode %s\n", mode);
		return 2;
	}
	free(text);
	x4_tokenizer_free(t);
	x4_vocab_free(&v);
	return 0;
}
