/* A steady load for bench/serve-soak.sh: fires sdtbench:hit(i, 2i, i^0x5a5a)
 * RATE times a second (default 100,000), in batches every 10 ms, for
 * SECONDS seconds (default 3600), and prints how many it fired.
 *
 *     paced RATE SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long rate = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    long seconds = argc > 2 ? strtol(argv[2], NULL, 10) : 3600;
    long batch = rate / 100, fired = 0;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (long tick = 0; tick < seconds * 100; tick++) {
        for (long k = 0; k < batch; k++, fired++) {
            long i = fired, twice = i * 2, mixed = i ^ 0x5a5a;
            STAP_PROBE3(sdtbench, hit, i, twice, mixed);
        }
        next.tv_nsec += 10000000L;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    printf("paced: fired=%ld\n", fired);
    return 0;
}
