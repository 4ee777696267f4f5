/* Start-up fixture for bench/trace.sh: fires sdtbench:once(42) once and exits.
 *
 * Built twice: as is (one site), and with -DMANY_SITES plus a generated
 * header holding 10,000 distinct probe sites (sdtbench:s0 .. sdtbench:s9999),
 * each fired once, so that a tracer of 'sdtbench:*' must deliver 10,001
 * events.
 *
 * With a -c tracer the process is held before exec until the probes are
 * attached, so main() runs only once tracing is live. If SDTBENCH_T0 holds
 * the launch time (bash's $EPOCHREALTIME, taken just before the tracer is
 * started), the fixture prints the launch-to-live latency on stderr:
 *
 *     sdtbench: live_us=12345
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sdt.h>

int main(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const char *t0 = getenv("SDTBENCH_T0");
    if (t0) {
        double launched = strtod(t0, NULL);
        double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
        fprintf(stderr, "sdtbench: live_us=%.0f\n", (now - launched) * 1e6);
    }
    STAP_PROBE1(sdtbench, once, 42);
#ifdef MANY_SITES
#include "many-sites.h"
#endif
    return 0;
}
