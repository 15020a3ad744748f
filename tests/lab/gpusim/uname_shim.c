/*
 * gpusim (lab test code): present the simulated kernel release to uname(2) callers.
 *
 * Loaded through /etc/ld.so.preload on lab hosts only (boot adds it when this library was
 * built). The release comes from /var/lib/gpusim/kernel-release (a kernel whose headers the
 * host's Debian suite ships), so `uname -r`, Ansible's ansible_kernel, DKMS and apt all see
 * the same kernel. Without that file the real release is returned unchanged.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

int uname(struct utsname *buf)
{
    if (syscall(SYS_uname, buf) != 0)
        return -1;
    int fd = open("/var/lib/gpusim/kernel-release", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char release[sizeof buf->release];
    ssize_t n = read(fd, release, sizeof release - 1);
    close(fd);
    while (n > 0 && (release[n - 1] == '\n' || release[n - 1] == ' '))
        n--;
    if (n > 0) {
        memcpy(buf->release, release, (size_t)n);
        buf->release[n] = '\0';
    }
    return 0;
}
