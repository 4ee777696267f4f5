# A method-call-heavy workload: fib(N) calls fib 2*fib(N+1)-1 times.
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


fib(int(sys.argv[1]))
