# copy the kernel headers into OUT (default kern/ beside this file), made
# host-compilable:  python3 prep.py KERNELS_DIR [OUT]
import re, sys, os
here = os.path.dirname(os.path.abspath(__file__))
src = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, 'kern')
names = ['core_dev.cuh', 'pdl.cuh', 'mma_dev.cuh', 'mla_attn.cuh', 'mla_mma_dev.cuh', 'mla_mma.cuh',
         'mla_prefill_mma.cuh']
os.makedirs(out, exist_ok=True)
for n in names:
    s = open(os.path.join(src, n)).read()
    s = s.replace('extern __shared__', 'extern')
    # kernel launches (host launchers only, never called here)
    s = s.replace('k<<<g, b, smem, s>>>(args...);', '(void)0;')
    s = re.sub(r'mla_prefill_mma_kernel<NSTAGE><<<.*>>>\(a, n_rows\);', '(void)0;', s)
    if n == 'mma_dev.cuh':  # the sm_80 instruction wrappers become the emulator's
        a = s.index('#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800')
        b = s.index('#endif', a) + len('#endif')
        prims = os.path.join(here, 'emu_prims.h')
        s = (s[:a] + '} /* namespace x4m */\n#include "%s"\nnamespace x4m {\n' % prims +
             'using ::smem_u32;\nusing ::cp_async16;\nusing ::cp_async_commit;\n'
             'using ::cp_async_wait;\nusing ::ldsm_x4;\nusing ::ldsm_x4_t;\nusing ::mma16816;\n' + s[b:])
    assert not [l for l in s.split('\n') if '<<<' in l and not l.lstrip().startswith(('/*', '*'))], n
    open(os.path.join(out, n), 'w').write(s)
print('ok')
