/* bench/bcc/allocs.c: N calls of malloc(64), each freed at once. */
#include <stdlib.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    for (long i = 0; i < n; i++) {
        void *volatile p = malloc(64);
        free(p);
    }
    return 0;
}
