/* Per-hit cost of sdt's hit counter, for bench/hits.sh.
 *
 * Fires one of two probes N times in a tight loop, with the same three
 * arguments, and prints the loop's own wall time on stderr:
 *
 *     sdtbench: hits=2000000 loop_ns=123456789
 *
 *   loop N counted   fires python:function__entry, a probe sdt counts
 *                    (it waits for CPython's profile function, so sdt
 *                    tells at the end whether it fired)
 *   loop N plain     fires sdtbench:hit, which sdt does not count
 *
 * Same site shape, same arguments, so the difference between the two
 * traced loops is what counting costs. No semaphores; every traced hit is
 * an int3 trap on the default <sys/sdt.h> nop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    int counted = argc > 2 && strcmp(argv[2], "counted") == 0;
    long long t0 = now_ns();
    if (counted) {
        for (long i = 0; i < n; i++) {
            long twice = i * 2, mixed = i ^ 0x5a5a;
            STAP_PROBE3(python, function__entry, i, twice, mixed);
        }
    } else {
        for (long i = 0; i < n; i++) {
            long twice = i * 2, mixed = i ^ 0x5a5a;
            STAP_PROBE3(sdtbench, hit, i, twice, mixed);
        }
    }
    long long t1 = now_ns();
    fprintf(stderr, "sdtbench: hits=%ld loop_ns=%lld\n", n, t1 - t0);
    return 0;
}
