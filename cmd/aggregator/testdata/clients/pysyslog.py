"""Send messages with the standard library's logging.handlers.SysLogHandler.

Usage: pysyslog.py TRANSPORT ADDRESS TAG < messages.json

TRANSPORT is unix, unixgram, tcp or udp; ADDRESS a socket path or
host:port. The messages (a JSON array of strings) are logged one by one at
WARNING with facility local3, through a handler left at its defaults
(append_nul on). For a socket path the handler is given no socktype, as
usual: it tries a datagram socket and falls back to a stream socket when
the path is a stream socket. The ident "TAG[PID]: " is what a program sets
to name itself. Prints this process's pid.
"""
import json
import logging
import logging.handlers
import os
import socket
import sys


def main():
    transport, address, tag = sys.argv[1:4]
    messages = json.load(sys.stdin)
    if transport in ("unix", "unixgram"):
        handler = logging.handlers.SysLogHandler(
            address=address, facility=logging.handlers.SysLogHandler.LOG_LOCAL3)
        want = socket.SOCK_STREAM if transport == "unix" else socket.SOCK_DGRAM
        if handler.socktype != want:
            sys.exit(f"SysLogHandler chose socket type {handler.socktype} for {address}, want {want}")
    else:
        host, port = address.rsplit(":", 1)
        socktype = socket.SOCK_STREAM if transport == "tcp" else socket.SOCK_DGRAM
        handler = logging.handlers.SysLogHandler(
            address=(host, int(port)), facility=logging.handlers.SysLogHandler.LOG_LOCAL3,
            socktype=socktype)
    handler.ident = f"{tag}[{os.getpid()}]: "
    errors = []
    handler.handleError = lambda record: errors.append(sys.exc_info()[1])
    log = logging.getLogger(tag)
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    for m in messages:
        log.warning(m)
    handler.close()
    if errors:
        sys.exit(f"SysLogHandler failed: {errors[0]!r}")
    print(os.getpid())


if __name__ == "__main__":
    main()
