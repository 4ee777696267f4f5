/* Runs a command with the kernel's BPF run-time statistics on: every BPF
 * program's run_cnt and run_time_ns count while the command runs
 * (BPF_ENABLE_STATS; they stop when this process exits, whatever happens
 * to the command). For bench/hits.sh, which reads them with bpftool. */
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.enable_stats.type = BPF_STATS_RUN_TIME;
    int fd = syscall(SYS_bpf, BPF_ENABLE_STATS, &attr, sizeof attr);
    if (fd < 0) {
        perror("stats: BPF_ENABLE_STATS");
        return 1;
    }
    if (argc < 2)
        return 2;
    pid_t child = fork();
    if (child == 0) {
        execvp(argv[1], argv + 1);
        perror("stats: exec");
        _exit(127);
    }
    int status = 0;
    waitpid(child, &status, 0);
    close(fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
