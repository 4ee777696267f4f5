/* The traced program of bench/hits.sh.
 *
 * Waits for a line on standard input, then fires two probes N times each
 * (default 2,000,000), with the same three arguments, interleaved:
 *
 *   python:function__entry   a probe sdt counts (it waits for CPython's
 *                            profile function, so sdt tells at the end of
 *                            a run whether it fired)
 *   sdtbench:hit             a probe sdt does not count
 *
 * then prints "fired N" on standard output and waits for another line
 * before it exits, so that the tracer's programs can be read while they
 * are still attached. No semaphores: every hit runs the program.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 2000000;
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    for (long i = 0; i < n; i++) {
        long twice = i * 2, mixed = i ^ 0x5a5a;
        STAP_PROBE3(python, function__entry, i, twice, mixed);
        STAP_PROBE3(sdtbench, hit, i, twice, mixed);
    }
    printf("fired %ld\n", n);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 0;
    return 0;
}
