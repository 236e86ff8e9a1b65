/* trunk_cpu_f64.c - the CPU trunk in double from the dequantized weights:
 * the oracle every other arithmetic is compared with (cache in double
 * unless X4_KV_F16 asks for fp16 values, docs/numerics.md 1.7). */
#define REAL double
#define REAL_IS_FLOAT 0
#define SFX f64
#define R_EXP exp
#define R_SQRT sqrt
#include "trunk_cpu_tmpl.h"
