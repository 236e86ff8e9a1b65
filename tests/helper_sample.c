/*
 * helper_sample.c - the host sampler on rows of dumped logits, so a test can
 * ask whether another device's picks follow the same rule:
 *   helper_sample FILE.npy FIRST_ROW STEPS TEMPERATURE TOP_K TOP_P SEED
 * prints the ids x4_sample picks from rows FIRST_ROW .. FIRST_ROW+STEPS-1
 * (one sampler, so draw i uses step i, as a request does), comma separated.
 * Exit 0 ok, 1 failure, 2 usage.
 */
#include "x4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 8) {
		fprintf(stderr, "usage: helper_sample FILE.npy FIRST_ROW STEPS T TOP_K TOP_P SEED\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "rb");
	unsigned char h[10];
	if (!f || fread(h, 1, 10, f) != 10 || memcmp(h, "\x93NUMPY", 6)) {
		fprintf(stderr, "helper_sample: %s is not a .npy file\n", argv[1]);
		return 1;
	}
	size_t hlen = (size_t)h[8] | (size_t)h[9] << 8;
	char *hdr = calloc(1, hlen + 1);
	if (!hdr || fread(hdr, 1, hlen, f) != hlen)
		return 1;
	unsigned long long rows = 0;
	int cols = 0;
	const char *sh = strstr(hdr, "'shape': (");
	if (!strstr(hdr, "'<f4'") || !sh || sscanf(sh, "'shape': (%llu, %d)", &rows, &cols) != 2) {
		fprintf(stderr, "helper_sample: %s is not a 2-D float32 array\n", argv[1]);
		return 1;
	}
	long first = atol(argv[2]), steps = atol(argv[3]);
	x4_sampler_opts o = { (float)atof(argv[4]), atoi(argv[5]), (float)atof(argv[6]),
			      strtoull(argv[7], NULL, 10) };
	x4_sampler *s;
	x4_err e;
	if (x4_sampler_create(&s, &o, &e) || first < 0 || steps < 1 ||
	    (unsigned long long)(first + steps) > rows) {
		fprintf(stderr, "helper_sample: bad arguments for %llu rows: %s\n", rows,
			e.code ? e.msg : "");
		return 2;
	}
	float *row = malloc(sizeof *row * (size_t)cols);
	if (!row || fseek(f, (long)(10 + hlen) + first * cols * (long)sizeof *row, SEEK_SET))
		return 1;
	for (long i = 0; i < steps; i++) {
		if (fread(row, sizeof *row, (size_t)cols, f) != (size_t)cols)
			return 1;
		printf("%s%d", i ? "," : "", x4_sample(s, row, cols));
	}
	printf("\n");
	x4_sampler_free(s);
	free(row);
	free(hdr);
	fclose(f);
	return 0;
}
