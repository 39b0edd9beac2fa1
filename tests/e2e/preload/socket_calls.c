/* The C library calls Python does not make, on one connection to a RESP server at 127.0.0.1:PORT:
 * writev/readv, sendmsg/recvmsg, recv(MSG_WAITALL), ppoll, pselect, epoll_pwait and epoll_pwait2 (when
 * the C library has it), F_DUPFD_CLOEXEC, dup2 onto another number, fcntl O_NONBLOCK and EAGAIN.
 * Prints one "name value" line per check; the test compares the output with and without the preload. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static void expect(int ok, const char *what) {
    if (!ok) {
        printf("FAILED %s (errno %d)\n", what, errno);
        exit(1);
    }
}

/* Reads exactly n bytes (the reply to check). */
static void read_exact(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        expect(r > 0, "read");
        got += (size_t)r;
    }
    buf[n] = 0;
}

int main(int argc, char **argv) {
    expect(argc == 2, "usage: socket_calls PORT");
    signal(SIGPIPE, SIG_IGN);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    expect(connect(fd, (struct sockaddr *)&to, sizeof to) == 0, "connect");
    char buf[256];

    /* writev + readv: "+PONG\r\n" split over two buffers. */
    struct iovec out[2] = {{"PI", 2}, {"NG\r\n", 4}};  /* the reply: "+P" into a, "ONG\r\n" into b */
    expect(writev(fd, out, 2) == 6, "writev");
    char a[3] = {0}, b[5] = {0};
    struct iovec in[2] = {{a, 2}, {b, 4}};
    size_t got = 0;
    while (got < 7) {
        struct iovec rest[2];
        int count = 0;
        if (got < 2) rest[count++] = (struct iovec){a + got, 2 - got};
        size_t into_b = got > 2 ? got - 2 : 0;
        rest[count++] = (struct iovec){b + into_b, 5 - into_b};
        ssize_t r = readv(fd, rest, count);
        expect(r > 0, "readv");
        got += (size_t)r;
    }
    (void)in;
    printf("readv %s|%.3s\n", a, b);

    /* sendmsg + recv(MSG_WAITALL) of the whole reply. */
    struct iovec echo[3] = {{"ECHO ", 5}, {"hello", 5}, {"\r\n", 2}};
    struct msghdr message = {.msg_iov = echo, .msg_iovlen = 3};
    expect(sendmsg(fd, &message, 0) == 12, "sendmsg");
    ssize_t r = recv(fd, buf, 11, MSG_WAITALL);
    buf[r > 0 ? r : 0] = 0;
    printf("waitall %zd %s", r, buf);

    /* Writing nothing returns 0 at once. */
    printf("empty_write %zd\n", write(fd, "", 0));

    /* ppoll: not readable until a request is out, then readable. */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct timespec short_wait = {0, 50 * 1000 * 1000};
    printf("ppoll_idle %d\n", ppoll(&p, 1, &short_wait, NULL));
    expect(write(fd, "PING\r\n", 6) == 6, "write");
    struct timespec long_wait = {5, 0};
    int ready = ppoll(&p, 1, &long_wait, NULL);
    printf("ppoll_ready %d %d\n", ready, (p.revents & POLLIN) != 0);
    read_exact(fd, buf, 7);

    /* pselect, the same way. */
    fd_set readable;
    FD_ZERO(&readable);
    FD_SET(fd, &readable);
    printf("pselect_idle %d\n", pselect(fd + 1, &readable, NULL, NULL, &short_wait, NULL));
    expect(write(fd, "PING\r\n", 6) == 6, "write");
    FD_ZERO(&readable);
    FD_SET(fd, &readable);
    ready = pselect(fd + 1, &readable, NULL, NULL, &long_wait, NULL);
    printf("pselect_ready %d %d\n", ready, FD_ISSET(fd, &readable) != 0);
    read_exact(fd, buf, 7);

    /* epoll_pwait and epoll_pwait2. */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event want = {.events = EPOLLIN, .data.u64 = 0x1234};
    expect(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &want) == 0, "epoll_ctl");
    expect(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &want) == -1 && errno == EEXIST, "epoll_ctl EEXIST");
    struct epoll_event seen[4];
    printf("epoll_idle %d\n", epoll_pwait(ep, seen, 4, 50, NULL));
    expect(write(fd, "PING\r\n", 6) == 6, "write");
    int n = epoll_pwait(ep, seen, 4, 5000, NULL);
    printf("epoll_ready %d %llx\n", n, n > 0 ? (unsigned long long)seen[0].data.u64 : 0ULL);
    read_exact(fd, buf, 7);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    printf("epoll2_idle %d\n", epoll_pwait2(ep, seen, 4, &short_wait, NULL));
    expect(write(fd, "PING\r\n", 6) == 6, "write");
    n = epoll_pwait2(ep, seen, 4, &long_wait, NULL);
    printf("epoll2_ready %d %llx\n", n, n > 0 ? (unsigned long long)seen[0].data.u64 : 0ULL);
    read_exact(fd, buf, 7);
#endif
    expect(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) == 0, "epoll_ctl DEL");
    expect(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) == -1 && errno == ENOENT, "epoll_ctl ENOENT");
    close(ep);

    /* Duplicates: F_DUPFD_CLOEXEC and dup2 onto a chosen number work as the connection. */
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    printf("dupfd %d cloexec %d\n", copy >= 100, (fcntl(copy, F_GETFD) & FD_CLOEXEC) != 0);
    expect(write(copy, "PING\r\n", 6) == 6, "write on dup");
    read_exact(fd, buf, 7);
    printf("via_dup %s", buf);
    expect(dup2(fd, 200) == 200, "dup2");
    close(fd);
    close(copy);
    expect(write(200, "PING\r\n", 6) == 6, "write on dup2");
    read_exact(200, buf, 7);
    printf("via_dup2 %s", buf);

    /* Non-blocking: EAGAIN with nothing there, O_NONBLOCK reported back. */
    int flags = fcntl(200, F_GETFL);
    expect(fcntl(200, F_SETFL, flags | O_NONBLOCK) == 0, "F_SETFL");
    printf("nonblock %d\n", (fcntl(200, F_GETFL) & O_NONBLOCK) != 0);
    r = read(200, buf, sizeof buf);
    printf("eagain %d\n", r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
    close(200);
    printf("done\n");
    return 0;
}
