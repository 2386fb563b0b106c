/* Preloaded (LD_PRELOAD) into a process, this makes the CPU look like an AVX2-only one to it: AVX-512,
 * AVX-512 VNNI, AVX-VNNI, AVX-512 BF16/FP16 and AMX are cleared from what CPUID answers, so the libraries'
 * run-time dispatch (onnxruntime's MLAS, oneDNN, XNNPACK, numpy) picks the kernels such a CPU gets.
 * How: Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, the "cpuid_fault" flag): every CPUID then traps,
 * and the SIGSEGV handler answers it from the real instruction with those bits cleared.  The faulting
 * setting is inherited by threads and forks and reset by execve, where this library loads again.
 * The program's own SIGSEGV handlers (Python's faulthandler, pytest's) are kept aside by the sigaction
 * below and called for real faults, so the CPUID handler stays first.
 * A process in which faulting cannot be turned on exits with status 86 and a message: it never runs unmasked.
 * devices/isa.py builds it (cc -shared -fPIC) and sets LD_PRELOAD; it sets TINYGLOT_CPUID_MASKED=avx2. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define BIT(n) (1u << (n))
/* leaf 7, subleaf 0, EBX: avx512f, dq, ifma, pf, er, cd, bw, vl */
#define L7_EBX (BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31))
/* leaf 7, subleaf 0, ECX: avx512_vbmi, vbmi2, vnni, bitalg, vpopcntdq */
#define L7_ECX (BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14))
/* leaf 7, subleaf 0, EDX: avx512_4vnniw, 4fmaps, vp2intersect, amx-bf16, avx512_fp16, amx-tile, amx-int8 */
#define L7_EDX (BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25))
/* leaf 7, subleaf 1, EAX: avx-vnni, avx512_bf16, amx-fp16, avx-ifma; EDX: avx-vnni-int8, avx-ne-convert,
 * amx-complex, avx-vnni-int16, avx10 */
#define L71_EAX (BIT(4) | BIT(5) | BIT(21) | BIT(23))
#define L71_EDX (BIT(4) | BIT(5) | BIT(8) | BIT(10) | BIT(19))

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static sigaction_fn real_sigaction;
static struct sigaction program_action;  /* the program's own SIGSEGV action (SIG_DFL until it sets one) */
static volatile int masking;

static long set_faulting(int on) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1); }

/* The program's SIGSEGV action is recorded, not installed: the CPUID handler stays, and passes real faults on. */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction) real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    if (sig != SIGSEGV || !masking) return real_sigaction(sig, act, old);
    if (old) *old = program_action;
    if (act) program_action = *act;
    return 0;
}

static void real_fault(int sig, siginfo_t *info, void *context) {
    if (program_action.sa_flags & SA_SIGINFO) {
        program_action.sa_sigaction(sig, info, context);
    } else if (program_action.sa_handler != SIG_DFL && program_action.sa_handler != SIG_IGN) {
        program_action.sa_handler(sig);
    } else {  /* the default action, when the faulting instruction runs again on return */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        real_sigaction(sig, &dfl, NULL);
    }
}

static void answer_cpuid(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *reg = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)reg[REG_RIP];
    /* a faulting CPUID is SI_KERNEL at a readable 0f a2; anything else is the program's fault */
    if (info->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
        real_fault(sig, info, context);
        return;
    }
    unsigned leaf = (uint32_t)reg[REG_RAX], sub = (uint32_t)reg[REG_RCX], a, b, c, d;
    set_faulting(0);
    __cpuid_count(leaf, sub, a, b, c, d);
    set_faulting(1);
    if (leaf == 7 && sub == 0) {
        b &= ~L7_EBX;
        c &= ~L7_ECX;
        d &= ~L7_EDX;
    } else if (leaf == 7 && sub == 1) {
        a &= ~L71_EAX;
        d &= ~L71_EDX;
    }
    reg[REG_RAX] = a;  /* CPUID zero-extends into the 64-bit registers */
    reg[REG_RBX] = b;
    reg[REG_RCX] = c;
    reg[REG_RDX] = d;
    reg[REG_RIP] += 2;
}

static void die(const char *what) {
    fprintf(stderr, "tinyglot cpuid_mask: %s; the process was stopped rather than run with the CPU's full ISA "
                    "(needs Linux on x86-64 with CPUID faulting: the cpuid_fault flag in /proc/cpuinfo)\n", what);
    _exit(86);
}

__attribute__((constructor)) static void mask_cpuid(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = answer_cpuid;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    if (!real_sigaction || real_sigaction(SIGSEGV, &action, &program_action) != 0)
        die("cannot install the SIGSEGV handler");
    masking = 1;
    if (set_faulting(1) != 0) die("arch_prctl(ARCH_SET_CPUID) refused to fault CPUID");
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);  /* answered by the handler: check it did its job */
    if (b & L7_EBX) die("CPUID still reports AVX-512");
    setenv("TINYGLOT_CPUID_MASKED", "avx2", 1);  /* the proof, for devices/isa.py, that this process is masked */
}
