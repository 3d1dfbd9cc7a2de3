// kept.c: issue 22's "Kept" sandbox refusals that escape.c does not try,
// one line each ("NAME: refused (ERR)" or "NAME: SUCCEEDED"), run by
// TestKeptSandboxDirectRefusals inside the sandbox and, as its control,
// outside. argv: gateway pid, a TCP port on 127.0.0.1, an abstract Unix
// socket name, a file outside the workspace, a file in the workspace.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>

#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif

static void report(const char *what, long rc) {
	if (rc < 0)
		printf("%s: refused (%s)\n", what, strerrorname_np(errno));
	else
		printf("%s: SUCCEEDED\n", what);
	fflush(stdout);
}

static long readfile(const char *path) {
	char buf[16];
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	long n = read(fd, buf, sizeof buf);
	close(fd);
	return n;
}

int main(int argc, char **argv) {
	if (argc != 6)
		return 2;
	int gw = atoi(argv[1]), port = atoi(argv[2]);
	char path[64];

	report("ptrace seize pid 1", ptrace(PTRACE_SEIZE, 1, 0, 0));
	report("ptrace seize gateway", ptrace(PTRACE_SEIZE, gw, 0, 0));
	report("signal pid 1", kill(1, 0));
	report("signal gateway", kill(gw, 0));
	snprintf(path, sizeof path, "/proc/%d/environ", gw);
	report("read gateway environ", readfile(path));
	snprintf(path, sizeof path, "/proc/%d/status", gw);
	report("read gateway status", readfile(path));
	report("read pid 1 environ", readfile("/proc/1/environ"));
	report("read /etc/shadow", readfile("/etc/shadow"));
	report("read token file", readfile(argv[4]));

	struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, "127.0.0.1", &in.sin_addr);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	report("tcp connect", s < 0 ? -1 : connect(s, (struct sockaddr *)&in, sizeof in));
	struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = 0};
	inet_pton(AF_INET, "127.0.0.1", &any.sin_addr);
	int b = socket(AF_INET, SOCK_STREAM, 0);
	report("tcp bind", b < 0 ? -1 : bind(b, (struct sockaddr *)&any, sizeof any));

	struct sockaddr_un un = {.sun_family = AF_UNIX};
	size_t n = strlen(argv[3]);
	memcpy(un.sun_path + 1, argv[3], n); // sun_path[0] == 0: abstract
	int u = socket(AF_UNIX, SOCK_STREAM, 0);
	report("abstract connect", u < 0 ? -1 : connect(u, (struct sockaddr *)&un, sizeof(sa_family_t) + 1 + n));

	char params[120] = {0};
	report("io_uring_setup", syscall(SYS_io_uring_setup, 4, params));

	// Past the file-size limit (the test sets 1 MiB): write fails with
	// EFBIG once SIGXFSZ is ignored.
	signal(SIGXFSZ, SIG_IGN);
	int f = open(argv[5], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	static char chunk[1 << 16];
	long rc = f < 0 ? -1 : 0;
	for (int i = 0; rc >= 0 && i < 32; i++) // 2 MiB
		rc = write(f, chunk, sizeof chunk);
	report("write past file_size", rc);
	return 0;
}
