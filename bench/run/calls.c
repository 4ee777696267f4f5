/* uretprobe fixture for bench/run.sh: calls work(i) N times (default
 * 1,000,000) in a tight loop and prints the loop's own wall time on
 * stderr, so that tracer start-up and tear-down are not part of it:
 *
 *     sdtbench: calls=1000000 loop_ns=123456789
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) long work(long i)
{
    __asm__ volatile("" ::: "memory");
    return i * 3;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    long sum = 0;
    long long t0 = now_ns();
    for (long i = 0; i < n; i++)
        sum += work(i);
    long long t1 = now_ns();
    fprintf(stderr, "sdtbench: calls=%ld loop_ns=%lld sum=%ld\n", n, t1 - t0, sum);
    return 0;
}
