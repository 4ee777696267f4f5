# A method-call-heavy workload: fib(N) calls fib 2*fib(N+1)-1 times.
def fib(n)
  n < 2 ? n : fib(n - 1) + fib(n - 2)
end

fib(ARGV[0].to_i)
