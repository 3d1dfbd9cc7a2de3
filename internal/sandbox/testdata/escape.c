// escape tries, from inside a sandboxed tool, what issue 22 found or
// feared: reaching into its parent (the launcher) and reaching a Unix
// socket by path. One line per attempt: "NAME: refused (...)" or
// "NAME: SUCCEEDED". Argument: the path of a Unix socket to connect to.
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif

static void report(const char *what, long rc) {
	if (rc < 0)
		printf("%s: refused (%s)\n", what, strerror(errno));
	else
		printf("%s: SUCCEEDED\n", what);
}

int main(int argc, char **argv) {
	pid_t pp = getppid();
	long rc = ptrace(PTRACE_ATTACH, pp, 0, 0);
	report("ptrace attach", rc);
	if (rc == 0) {
		waitpid(pp, 0, __WALL);
		ptrace(PTRACE_DETACH, pp, 0, SIGCONT); // leave it running
	}

	// The permission check comes before the copy: EPERM when refused,
	// EFAULT (an unmapped address) when permitted.
	char buf[64];
	struct iovec local = {buf, sizeof buf}, remote = {(void *)4096, sizeof buf};
	rc = syscall(SYS_process_vm_readv, pp, &local, 1, &remote, 1, 0);
	if (rc < 0 && errno == EFAULT)
		rc = 0;
	report("process_vm_readv", rc);

	int pfd = syscall(SYS_pidfd_open, pp, 0);
	if (pfd < 0) {
		report("pidfd_getfd", -1);
	} else {
		rc = -1;
		for (int fd = 0; fd < 64 && rc < 0; fd++) {
			int got = syscall(SYS_pidfd_getfd, pfd, fd, 0);
			if (got >= 0) {
				rc = 0;
				close(got);
			} else if (errno != EBADF) {
				break;
			}
		}
		report("pidfd_getfd", rc);
	}

	if (argc > 1) {
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		report("socket unix", s);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
		if (s >= 0)
			report("connect unix", connect(s, (struct sockaddr *)&a, sizeof a));
		else
			report("connect unix", -1);
		// The family in the upper half of the register: the kernel reads
		// the low 32 bits only.
		report("socket unix high bits", syscall(SYS_socket, 0x100000000L | AF_UNIX, SOCK_STREAM, 0));
		int sv[2];
		rc = socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);
		report("socketpair dgram", rc);
		if (rc == 0)
			report("sendto unix", sendto(sv[0], "x", 1, 0, (struct sockaddr *)&a, sizeof a));
		else
			report("sendto unix", -1);
	}
	report("socket netlink", socket(AF_NETLINK, SOCK_RAW, 0));
	report("socket packet", socket(AF_PACKET, SOCK_RAW, 0));
	report("socket inet raw", socket(AF_INET, SOCK_RAW, 1));
	char params[120] = {0};
	report("io_uring_setup", syscall(SYS_io_uring_setup, 4, params));
	// What must keep working: a stream pair (libuv, Python) and an IPv4
	// socket (Landlock's TCP rules decide its connects).
	int sv2[2];
	report("socketpair stream (allowed)", socketpair(AF_UNIX, SOCK_STREAM, 0, sv2));
	report("socket inet (allowed)", socket(AF_INET, SOCK_STREAM, 0));
	return 0;
}
