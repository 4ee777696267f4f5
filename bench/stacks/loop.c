/* Per-hit cost of recording a user stack, for bench/stacks.sh.
 *
 *     loop N [DEPTH]
 *
 * Fires sdtbench:hit(i) N times (default 1,000,000) in a tight loop,
 * DEPTH calls deep (default 8, plus main and the C library's start), and
 * prints the loop's own wall time on stderr, so that tracer start-up and
 * tear-down are not part of the number:
 *
 *     sdtbench: hits=1000000 loop_ns=123456789
 *
 * Built with frame pointers, so that the kernel walks every frame. No
 * semaphore, so that bpftrace 0.17 traces the same site.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Fires at the bottom of `depth` nested calls, n times. */
__attribute__((noinline)) static void descend(int depth, long n)
{
    if (depth > 1) {
        descend(depth - 1, n);
        __asm__ volatile("" ::: "memory");
        return;
    }
    for (long i = 0; i < n; i++)
        STAP_PROBE1(sdtbench, hit, i);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    int depth = argc > 2 ? atoi(argv[2]) : 8;
    long long t0 = now_ns();
    descend(depth, n);
    long long t1 = now_ns();
    fprintf(stderr, "sdtbench: hits=%ld loop_ns=%lld\n", n, t1 - t0);
    return 0;
}
