/* trunk_cpu_f32.c - the CPU trunk in float: what users run (the cache
 * holds fp16 values, as the earlier runtime stored it; docs/numerics.md 1.7). */
#define REAL float
#define REAL_IS_FLOAT 1
#define SFX f32
#define R_EXP expf
#define R_SQRT sqrtf
#include "trunk_cpu_tmpl.h"
