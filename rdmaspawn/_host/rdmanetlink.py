"""Ask the kernel over RDMA netlink whether it copies DMA-pinned pages at fork().

Asked directly, so that the answer does not depend on which libibverbs the
process has, or whether it has one.
"""

from __future__ import annotations

import errno
import os

__all__ = ["rdma_netlink_copy_on_fork"]

# RDMA netlink, from linux/netlink.h and rdma/rdma_netlink.h.
_NETLINK_RDMA = 20
_RDMA_NL_NLDEV = 5
_RDMA_NLDEV_CMD_SYS_GET = 6
_RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK = 93  # u8
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER


def rdma_netlink_copy_on_fork() -> tuple[bool | None, str]:
    """(answer, how it went): what libibverbs (rdma-core >= 35) asks the kernel;
    None with the reason where it cannot be asked (nor by libibverbs)."""
    import _socket  # not socket, nor at the top: RDMASPAWN's start-up may import this module

    try:
        sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, _NETLINK_RDMA)
    except OSError as e:
        if e.errno == errno.EPROTONOSUPPORT:
            return None, "RDMA netlink is unavailable: ib_core is not loaded"
        return None, f"RDMA netlink socket failed: {e.strerror}"
    import struct  # here: most hosts have no RDMA netlink, and never get this far

    try:
        sock.settimeout(2.0)
        kind = (_RDMA_NL_NLDEV << 10) + _RDMA_NLDEV_CMD_SYS_GET
        sock.sendto(struct.pack("=IHHII", 16, kind, _NLM_F_REQUEST, 1, 0), (0, 0))
        reply = sock.recv(65536)
    except OSError as e:  # socket.timeout too
        return None, f"RDMA netlink did not answer: {e.strerror or e}"
    finally:
        sock.close()
    return _copy_on_fork_attribute(reply)


def _copy_on_fork_attribute(reply: bytes) -> tuple[bool | None, str]:
    import struct

    if len(reply) < 16:
        return None, "RDMA netlink answered with a short message"
    length, kind = struct.unpack_from("=IH", reply)
    if kind == _NLMSG_ERROR:
        err = -struct.unpack_from("=i", reply, 16)[0] if len(reply) >= 20 else 0
        return None, f"RDMA netlink refused the query: {os.strerror(err)}"
    pos, end = 16, min(length, len(reply))
    while pos + 4 <= end:
        nla_len, nla_type = struct.unpack_from("=HH", reply, pos)
        if nla_len < 4:
            break
        if nla_type & _NLA_TYPE_MASK == _RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK and nla_len >= 5:
            copies = bool(reply[pos + 4])
            return copies, f"RDMA netlink answered: copy-on-fork {'on' if copies else 'off'}"
        pos += (nla_len + 3) & ~3
    return False, "RDMA netlink answered, without the copy-on-fork attribute (kernel < 5.13)"
