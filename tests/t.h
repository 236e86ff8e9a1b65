/*
 * t.h - the tiny test harness every tests/test_*.c uses.
 *
 * Each check prints one line, "PASS name" or "FAIL name: why", so that
 * tests/run.sh can count them across C and Python tests alike; a failing
 * line carries what is needed to rerun the case (op, type, shape, seed).
 */
#ifndef X4_T_H
#define X4_T_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_passed, t_failed;

static void t_result(int ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), unused));
static void t_result(int ok, const char *name, const char *fmt, ...)
{
	if (ok) {
		t_passed++;
		printf("PASS %s\n", name);
	} else {
		t_failed++;
		printf("FAIL %s: ", name);
		va_list ap;
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
	fflush(stdout);
}

/* T_OK(cond, name, fmt, ...): one check. */
#define T_OK(cond, name, ...) t_result(!!(cond), (name), __VA_ARGS__)

/* The source tree's root, for tests that run built binaries (tests/run.sh
 * runs every test from there). */
static int t_done(void) __attribute__((unused));
static int t_done(void)
{
	printf("# %d passed, %d failed\n", t_passed, t_failed);
	return t_failed ? 1 : 0;
}

#endif
