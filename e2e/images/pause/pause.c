/* The sandbox image's program: holds a pod's namespaces open until it is told to stop.
 *
 * It waits for signals forever; as PID 1 of the pod it reaps the children that are
 * reparented to it (SIGCHLD), and it exits 0 on SIGINT or SIGTERM. `pause -v` prints its
 * version. Built with `gcc -static` so the image holds this one file. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "3.10-etcd-operator"

static void on_stop(int signo) {
    static const char message[] = "pause: stopping\n";
    (void)signo;
    (void)!write(STDERR_FILENO, message, sizeof message - 1);
    _exit(0);
}

static void on_child(int signo) {
    int saved = errno;
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int handle(int signo, void (*handler)(int), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    return sigaction(signo, &action, NULL);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "-v") == 0) {
        printf("pause %s\n", VERSION);
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: pause [-v]\n");
        return 2;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not PID 1, orphans will not be reaped here\n");
    }
    if (handle(SIGINT, on_stop, 0) != 0 || handle(SIGTERM, on_stop, 0) != 0 ||
        handle(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART) != 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
}
