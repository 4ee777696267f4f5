/* Per-hit overhead fixture for bench/trace.sh.
 *
 * Fires the probe sdtbench:hit(i, i*2, i^0x5a5a) N times (default 2,000,000)
 * in a tight loop and prints the loop's own wall time on stderr, so that
 * tracer start-up and tear-down are not part of the number:
 *
 *     sdtbench: hits=2000000 loop_ns=123456789
 *
 * No semaphore: bpftrace 0.17 misses semaphore-gated probes, and the
 * benchmark compares against it on the same site. The site is the default
 * <sys/sdt.h> 1-byte nop, so every traced hit is an int3 trap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sdt.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 2000000;
    long long t0 = now_ns();
    for (long i = 0; i < n; i++) {
        long twice = i * 2, mixed = i ^ 0x5a5a;
        STAP_PROBE3(sdtbench, hit, i, twice, mixed);
    }
    long long t1 = now_ns();
    fprintf(stderr, "sdtbench: hits=%ld loop_ns=%lld\n", n, t1 - t0);
    return 0;
}
