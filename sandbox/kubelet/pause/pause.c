/* SPDX-License-Identifier: GPL-3.0-or-later
 *
 * The sandbox's pause program: the first process of every pod sandbox on a kubelet node. It holds the pod's
 * namespaces open and does nothing else: it sleeps until SIGTERM or SIGINT (then exits 0) and, being PID 1 of the
 * pod's PID namespace when the pod shares one, reaps every child that is reparented to it. Written for the sandbox
 * (sandbox/kubelet/README.md); it is not the Kubernetes project's pause binary, only a program with the same job.
 * Built static (no libc in a FROM scratch image).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
    stop_signal = sig;
}

static void on_child(int sig)
{
    int saved = errno;

    (void)sig;
    /* reap every child that has ended: several may end before one SIGCHLD is delivered */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int handle(int sig, void (*fn)(int), int flags)
{
    struct sigaction action;

    memset(&action, 0, sizeof(action));
    action.sa_handler = fn;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    return sigaction(sig, &action, NULL);
}

int main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
        puts("kubegpu sandbox pause (a stand-in, not registry.k8s.io's pause)");
        return 0;
    }
    if (getpid() != 1)
        fprintf(stderr, "pause: warning: not PID 1; reaping only this process's own children\n");
    if (handle(SIGTERM, on_stop, 0) || handle(SIGINT, on_stop, 0) || handle(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART)) {
        perror("pause: sigaction");
        return 1;
    }
    while (!stop_signal)
        pause();
    fprintf(stderr, "pause: shutting down, got signal %d\n", (int)stop_signal);
    return 0;
}
