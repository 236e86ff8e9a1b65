/*
 * json.c - a strict syntax check of a JSON text (RFC 8259), for the release
 * folder's config.json: x4 takes keys from it by a plain scan, so a file
 * that is not JSON at all must be refused before the scan believes it.
 * Nothing is built: the check only says where the text stops being JSON.
 */
#include "x4_int.h"

#define JSON_MAX_DEPTH 64

struct jp {
	const char *s, *end, *p;
	const char *why; /* set at the first error */
};

static void ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static bool fail(struct jp *j, const char *why)
{
	if (!j->why)
		j->why = why;
	return false;
}

static bool lit(struct jp *j, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
		return fail(j, "not a JSON value");
	j->p += n;
	return true;
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool string(struct jp *j)
{
	j->p++; /* the opening quote */
	while (j->p < j->end) {
		unsigned char c = (unsigned char)*j->p;
		if (c == '"') {
			j->p++;
			return true;
		}
		if (c < 0x20)
			return fail(j, "a control byte inside a string");
		if (c == '\\') {
			if (j->end - j->p < 2)
				break;
			char x = j->p[1];
			if (x == 'u') {
				if (j->end - j->p < 6 || !is_hex(j->p[2]) || !is_hex(j->p[3]) ||
				    !is_hex(j->p[4]) || !is_hex(j->p[5]))
					return fail(j, "a \\u escape without four hex digits");
				j->p += 6;
				continue;
			}
			if (!x || !strchr("\"\\/bfnrt", x))
				return fail(j, "an unknown escape in a string");
			j->p += 2;
			continue;
		}
		j->p++;
	}
	return fail(j, "a string that never ends");
}

static bool digits(struct jp *j)
{
	const char *p0 = j->p;
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
		j->p++;
	return j->p > p0;
}

static bool number(struct jp *j)
{
	if (*j->p == '-')
		j->p++;
	if (j->p < j->end && *j->p == '0')
		j->p++;
	else if (!digits(j))
		return fail(j, "a malformed number");
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (!digits(j))
			return fail(j, "a malformed number");
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (!digits(j))
			return fail(j, "a malformed number");
	}
	return true;
}

static bool value(struct jp *j, int depth);

/* An object or an array: the same walk, with keys for an object. */
static bool container(struct jp *j, int depth)
{
	char close = *j->p == '{' ? '}' : ']';
	bool object = close == '}';
	if (depth >= JSON_MAX_DEPTH)
		return fail(j, "nested deeper than 64 levels");
	j->p++;
	ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return true;
	}
	for (;;) {
		if (object) {
			ws(j);
			if (j->p >= j->end)
				return fail(j, "the text ends inside an object");
			if (*j->p != '"')
				return fail(j, "expected a quoted key");
			if (!string(j))
				return false;
			ws(j);
			if (j->p >= j->end || *j->p != ':')
				return fail(j, "expected ':' after a key");
			j->p++;
		}
		if (!value(j, depth + 1))
			return false;
		ws(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		if (j->p < j->end && *j->p == close) {
			j->p++;
			return true;
		}
		if (j->p >= j->end)
			return fail(j, object ? "the text ends inside an object" :
				    "the text ends inside an array");
		return fail(j, object ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static bool value(struct jp *j, int depth)
{
	ws(j);
	if (j->p >= j->end)
		return fail(j, "the text ends where a value should be");
	switch (*j->p) {
	case '{':
	case '[':
		return container(j, depth);
	case '"':
		return string(j);
	case 't':
		return lit(j, "true");
	case 'f':
		return lit(j, "false");
	case 'n':
		return lit(j, "null");
	default:
		if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
			return number(j);
		return fail(j, "not a JSON value");
	}
}

int x4_json_check(const char *s, size_t n, size_t *at, const char **why)
{
	struct jp j = { s, s + n, s, NULL };
	if (value(&j, 0)) {
		ws(&j);
		if (j.p == j.end)
			return 0;
		fail(&j, "text after the JSON value");
	}
	*at = (size_t)(j.p - s);
	*why = j.why;
	return -1;
}
