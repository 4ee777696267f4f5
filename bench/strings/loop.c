/* Per-hit cost of reading a string, for bench/strings.sh.
 *
 *     loop N [zap]
 *
 * Fires sdtbench:req(method, i) N times (default 2,000,000) in a tight
 * loop, method "GET" for 7 hits in 10 and "POST" for the rest, and prints
 * the loop's own wall time on stderr, so that tracer start-up and
 * tear-down are not part of the number:
 *
 *     sdtbench: hits=2000000 loop_ns=123456789
 *
 * The strings are each alone on a page of .rodata. Without `zap` the
 * program reads them once first, so their pages are resident: the common
 * case. With `zap`, each page is dropped from the page tables
 * (MADV_DONTNEED) before every hit, so every read must fault it in (a
 * minor fault: the page stays in the page cache), as for a literal the
 * program never reads; the untraced loop pays for the madvise calls too.
 * No semaphore, so that bpftrace 0.17 traces the same site.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sdt.h>
#include <time.h>

#define PAGE 4096

static const struct {
    char text[PAGE];
} methods[2] __attribute__((aligned(PAGE))) = {{"GET"}, {"POST"}};

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 2000000;
    int zap = argc > 2 && strcmp(argv[2], "zap") == 0;
    /* Read through volatile, or the compiler folds the lengths in and
     * the pages are never touched. */
    size_t touched = 0;
    for (int m = 0; m < 2; m++)
        for (const volatile char *c = methods[m].text; *c; c++)
            touched++;
    long long t0 = now_ns();
    for (long i = 0; i < n; i++) {
        const char *method = methods[i % 10 >= 7].text;
        if (zap)
            madvise((void *)((uintptr_t)method & ~(uintptr_t)(PAGE - 1)), PAGE, MADV_DONTNEED);
        STAP_PROBE2(sdtbench, req, method, i);
    }
    long long t1 = now_ns();
    fprintf(stderr, "sdtbench: hits=%ld loop_ns=%lld touched=%zu\n", n, t1 - t0, touched);
    return 0;
}
