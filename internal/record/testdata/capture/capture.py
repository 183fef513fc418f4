#!/usr/bin/env python3
"""capture.py - regenerate internal/record/testdata/syslog-corpus.jsonl

Runs every syslog client we know of against capture sockets (UDP, TCP, unix
datagram, unix stream on private addresses) and writes the exact bytes each
one sent, one JSON object per record as the aggregator's listeners hand it
to record.Encoder.Append: a datagram split at '\n' (dgram), a stream split
at '\n' or by RFC 6587 octet counting (stream), empty records skipped. Hand
written edge cases follow the captured lines.

    python3 internal/record/testdata/capture/capture.py \
        > internal/record/testdata/syslog-corpus.jsonl

or, to capture only some clients (python, go, srslog, logger, glibc,
rsyslog, syslog-ng, handmade), e.g. one added later:

    python3 internal/record/testdata/capture/capture.py --only srslog

Needs: python3, logger (util-linux), go, gcc, unshare (glibc's syslog(3)
only writes to /dev/log, so the C client runs in a private mount namespace
with /dev on a tmpfs and /dev/log leading to our socket; root), rsyslogd and
syslog-ng (SYSLOG_NG_PREFIX, default ~/.cache/logagg/syslog-ng, as
scripts/setup.sh unpacks it). Clients that are missing are reported on
stderr and left out. Nothing touches the system's /dev/log or syslog
daemons: the daemons run in the foreground with private configs.

Python's SysLogHandler ends a message with a NUL and nothing else, also on
stream sockets, so consecutive messages on one connection run together
(for rsyslog and syslog-ng as for us); the capture opens one connection per
message, so each message is one frame.
"""

import json
import logging
import logging.handlers
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))

LONG = "long " + ("0123456789abcdefghijklmnopqrstuvwxyz" * 300)[:10 * 1024 - 5]
KINDS = [
    ("plain", "plain message"),
    ("unicode", "unicode h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c\u8a9e \U0001F389"),
    ("quotes", "quotes \"double\" 'single' back\\slash"),
    ("long", LONG),
    ("multiline", "multi\nline\nmessage"),
    ("empty", ""),
    ("esc", "\x1b[31mred\x1b[0m colour"),
    ("ctrl", "ctrl \x01 byte"),
    ("del", "del \x7f byte"),
    ("tab", "tab\tseparated\tfields"),
]
SENTINEL = b"\0capture-sentinel\0"


def log(*a):
    print("capture:", *a, file=sys.stderr)


class Capture:
    """Four listening sockets and a thread that reads whatever arrives."""

    def __init__(self, d):
        self.dir = d
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(64)
        self.dgram_path = os.path.join(d, "dgram.sock")
        self.ugram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ugram.bind(self.dgram_path)
        self.ugram.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.stream_path = os.path.join(d, "stream.sock")
        self.ustream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ustream.bind(self.stream_path)
        self.ustream.listen(64)
        self.udp_port = self.udp.getsockname()[1]
        self.tcp_port = self.tcp.getsockname()[1]
        self.lock = threading.Lock()
        self.reset()
        self.sel = selectors.DefaultSelector()
        for s, kind in ((self.udp, "udp"), (self.ugram, "unixgram")):
            self.sel.register(s, selectors.EVENT_READ, ("dgram", kind))
        for s, kind in ((self.tcp, "tcp"), (self.ustream, "unix")):
            self.sel.register(s, selectors.EVENT_READ, ("listen", kind))
        threading.Thread(target=self.loop, daemon=True).start()

    def reset(self):
        with self.lock:
            self.dgrams = []  # (transport, bytes)
            self.conns = []  # [transport, bytearray, eof]

    def loop(self):
        while True:
            for key, _ in self.sel.select():
                what, kind = key.data[0], key.data[1]
                if what == "dgram":
                    data = key.fileobj.recv(1 << 17)
                    with self.lock:
                        self.dgrams.append((kind, data))
                elif what == "listen":
                    c, _ = key.fileobj.accept()
                    conn = [kind, bytearray(), False]
                    with self.lock:
                        self.conns.append(conn)
                    self.sel.register(c, selectors.EVENT_READ, ("conn", conn))
                else:
                    conn = key.data[1]
                    data = key.fileobj.recv(1 << 17)
                    with self.lock:
                        if data:
                            conn[1] += data
                        else:
                            conn[2] = True
                    if not data:
                        self.sel.unregister(key.fileobj)
                        key.fileobj.close()

    def records(self):
        """The records received so far, framed; stream tails still open
        are left out."""
        out = []
        with self.lock:
            for kind, data in self.dgrams:
                if data != SENTINEL:
                    out += [(kind, r) for r in data.split(b"\n") if r]
            for kind, buf, eof in self.conns:
                if bytes(buf) != SENTINEL:
                    out += [(kind, r) for r in frame_stream(bytes(buf), eof)]
        return out

    def wait(self, cond, what, timeout=20):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(what)
            time.sleep(0.01)

    def settle(self):
        """Wait until everything sent before this call has been read: a
        sentinel datagram behind the others on each datagram socket, and
        every stream connection, a sentinel one last, at its end."""
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(SENTINEL, ("127.0.0.1", self.udp_port))
        s.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(SENTINEL, self.dgram_path)
        s.close()
        for fam, addr in ((socket.AF_INET, ("127.0.0.1", self.tcp_port)), (socket.AF_UNIX, self.stream_path)):
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.connect(addr)
            s.sendall(SENTINEL)
            s.close()

        def done():
            with self.lock:
                seen = sum(1 for _, d in self.dgrams if d == SENTINEL)
                conns_done = all(eof for _, _, eof in self.conns)
                sent = sum(1 for _, b, _ in self.conns if bytes(b) == SENTINEL)
            return seen == 2 and sent == 2 and conns_done

        self.wait(done, "sentinels")


def frame_stream(buf, eof):
    """Split a stream as internal/transport/stream does: RFC 6587 octet
    counting for a record starting with 1-9 digits, SP and '<' (a trailing
    LF inside the frame dropped), else LF-terminated lines; empty lines
    skipped; the unterminated tail only at the end of the stream."""
    out, i = [], 0
    while i < len(buf):
        if buf[i:i + 1] == b"\n":
            i += 1
            continue
        m = re.match(rb"([1-9][0-9]{0,8}) <", buf[i:i + 12])
        if m:
            n = int(m.group(1))
            start = i + len(m.group(1)) + 1
            if start + n > len(buf) and not eof:
                break
            frame = buf[start:start + n]
            if frame.endswith(b"\n"):
                frame = frame[:-1]
            out.append(frame)
            i = start + n
            continue
        j = buf.find(b"\n", i)
        if j < 0:
            if eof:
                out.append(buf[i:])
            break
        out.append(buf[i:j])
        i = j + 1
    return out


class Corpus:
    def __init__(self):
        self.lines = []

    def add(self, client, records):
        if not records:
            log(client, "sent nothing")
        for transport, b in records:
            self.lines.append({"client": client, "transport": transport, "bytes": b})

    def write(self, f):
        for l in self.lines:
            # Bytes that are not UTF-8 would not survive as a JSON string;
            # no client sends any.
            # Readable UTF-8; every control byte escaped, DEL too (json.dumps
            # leaves it raw).
            line = json.dumps({"client": l["client"], "transport": l["transport"],
                               "bytes": l["bytes"].decode("utf-8")}, ensure_ascii=False)
            f.write(line.replace("\x7f", "\\u007f") + "\n")


def run(args, **kw):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, **kw)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (args[0], p.returncode, p.stderr.decode(errors="replace")))
    return p


def capture(cap, corpus, client, send):
    cap.reset()
    try:
        send()
        cap.settle()
    except (OSError, RuntimeError, TimeoutError, subprocess.SubprocessError) as e:
        log(client, "skipped:", e)
        return
    corpus.add(client, cap.records())


# --- Python's logging.handlers.SysLogHandler -------------------------------

def python_client(cap, corpus):
    variants = [
        ("python-udp", ("127.0.0.1", cap.udp_port), socket.SOCK_DGRAM),
        ("python-unixgram", cap.dgram_path, socket.SOCK_DGRAM),
        ("python-tcp", ("127.0.0.1", cap.tcp_port), socket.SOCK_STREAM),
        ("python-unix", cap.stream_path, socket.SOCK_STREAM),
    ]
    for name, addr, st in variants:
        def send(addr=addr, st=st):
            for _, text in KINDS:
                h = logging.handlers.SysLogHandler(address=addr, facility="local3", socktype=st)
                h.setFormatter(logging.Formatter("pyapp[%(process)d]: %(message)s"))
                lg = logging.Logger("capture")
                lg.addHandler(h)
                lg.info(text)
                h.close()
        capture(cap, corpus, name, send)

    def bare():
        # No formatter: the PRI and the bare message, as the handler's
        # default sends it.
        h = logging.handlers.SysLogHandler(address=("127.0.0.1", cap.udp_port))
        lg = logging.Logger("capture")
        lg.addHandler(h)
        for _, text in KINDS[:2]:
            lg.warning(text)
        h.close()
    capture(cap, corpus, "python-bare-udp", bare)


# --- Go's log/syslog ---------------------------------------------------------

def go_client(cap, corpus, tmp):
    binp = os.path.join(tmp, "gosyslog")
    try:
        run(["go", "build", "-o", binp, "./internal/record/testdata/capture/gosyslog"], cwd=REPO)
    except (OSError, RuntimeError) as e:
        log("go client skipped:", e)
        return
    stdin = "".join(json.dumps(t) + "\n" for _, t in KINDS).encode()
    for name, net, addr in (("go-unixgram", "unixgram", cap.dgram_path), ("go-unix", "unix", cap.stream_path),
                            ("go-udp", "udp", "127.0.0.1:%d" % cap.udp_port),
                            ("go-tcp", "tcp", "127.0.0.1:%d" % cap.tcp_port)):
        capture(cap, corpus, name, lambda net=net, addr=addr: run([binp, net, addr], input=stdin))


# --- srslog (github.com/RackSec/srslog), Docker's syslog driver's package -----

SRSLOG_MODES = [
    # (client, network, address attribute, formatter, framer, tag)
    ("srslog-default-udp", "udp", "udp", "default", "default", "srsapp"),
    ("srslog-default-unixgram", "unixgram", "dgram", "default", "default", "srsapp"),
    ("srslog-default-tcp", "tcp", "tcp", "default", "default", "srsapp"),
    ("srslog-default-unix", "unix", "stream", "default", "default", "srsapp"),
    ("srslog-default-tcp-octet", "tcp", "tcp", "default", "octet", "srsapp"),
    ("srslog-unix-unixgram", "unixgram", "dgram", "unix", "default", "srsapp"),
    ("srslog-rfc3164-udp", "udp", "udp", "rfc3164", "default", "srsapp"),
    ("srslog-rfc3164-tcp-octet", "tcp", "tcp", "rfc3164", "octet", "srsapp"),
    ("srslog-rfc5424-udp", "udp", "udp", "rfc5424", "default", "srsapp"),
    # Docker's syslog driver with its defaults: UnixFormatter, the tag
    # naming the container.
    ("docker-default-unixgram", "unixgram", "dgram", "unix", "default", "dockerd/3f2a1b9c0d1e"),
    ("docker-default-udp", "udp", "udp", "unix", "default", "dockerd/3f2a1b9c0d1e"),
    ("docker-rfc3164-tcp", "tcp", "tcp", "rfc3164", "default", "web-1"),
]


def srslog_client(cap, corpus, tmp):
    binp = os.path.join(tmp, "srslog")
    try:
        run(["go", "build", "-o", binp, "./internal/record/testdata/capture/srslog"], cwd=REPO)
    except (OSError, RuntimeError) as e:
        log("srslog client skipped:", e)
        return
    addrs = {"udp": "127.0.0.1:%d" % cap.udp_port, "tcp": "127.0.0.1:%d" % cap.tcp_port,
             "dgram": cap.dgram_path, "stream": cap.stream_path}
    stdin = "".join(json.dumps(t) + "\n" for _, t in KINDS).encode()
    for name, net, addr, fmt_, framer, tag in SRSLOG_MODES:
        capture(cap, corpus, name, lambda net=net, addr=addrs[addr], fmt_=fmt_, framer=framer, tag=tag:
                run([binp, net, addr, fmt_, framer, tag], input=stdin))


# --- util-linux logger -------------------------------------------------------

def logger_client(cap, corpus, tmp):
    if not shutil.which("logger"):
        log("logger skipped: not installed")
        return
    # A socket path with only a stream socket, so that logger -u falls back
    # from datagram to stream.
    udp = ["-n", "127.0.0.1", "-P", str(cap.udp_port), "-d"]
    tcp = ["-n", "127.0.0.1", "-P", str(cap.tcp_port), "-T"]
    modes = [
        ("logger-unixgram", ["-u", cap.dgram_path, "-t", "lgapp", "-i"]),
        ("logger-unixgram-rfc3164", ["-u", cap.dgram_path, "-t", "lgapp", "--rfc3164"]),
        ("logger-unixgram-rfc5424", ["-u", cap.dgram_path, "-t", "lgapp", "--rfc5424"]),
        ("logger-unix", ["-u", cap.stream_path, "-t", "lgapp", "-p", "local1.err"]),
        ("logger-udp-rfc3164", udp + ["-t", "lgapp", "--rfc3164", "-i"]),
        ("logger-udp-rfc5424", udp + ["-t", "lgapp", "--rfc5424", "--msgid", "M1"]),
        ("logger-tcp-rfc3164", tcp + ["-t", "lgapp", "--rfc3164"]),
        ("logger-tcp-rfc5424", tcp + ["-t", "lgapp", "--rfc5424=notq"]),
        ("logger-tcp-octet-rfc3164", tcp + ["--octet-count", "-t", "lgapp", "--rfc3164"]),
        ("logger-tcp-octet-rfc5424", tcp + ["--octet-count", "-t", "lgapp"]),
        ("logger-udp-sd", udp + ["-t", "lgapp", "--rfc5424", "--sd-id", "zoo@123", "--sd-param", 'tiger="hungry"',
                                 "--sd-param", 'zebra="running"']),
    ]
    for name, args in modes:
        def send(args=args):
            for _, text in KINDS:
                run(["logger"] + args + ["--", text])
        capture(cap, corpus, name, send)

    # stdin: one message per line, as a shell pipeline sends them; with
    # --prio-prefix each line may carry its own <PRI>.
    lines = "".join(t.replace("\n", " ") + "\n" for _, t in KINDS if t).encode()
    capture(cap, corpus, "logger-stdin", lambda: run(["logger", "-u", cap.dgram_path, "-t", "lgapp"], input=lines))
    capture(cap, corpus, "logger-stdin-prio", lambda: run(["logger", "-u", cap.dgram_path, "-t", "lgapp", "--prio-prefix"],
                                                          input=b"<131>with prefix\nwithout prefix\n"))


# --- glibc syslog(3) ---------------------------------------------------------

def glibc_client(cap, corpus, tmp):
    binp = os.path.join(tmp, "csyslog")
    try:
        run(["gcc", "-O2", "-o", binp, os.path.join(HERE, "csyslog.c")])
    except (OSError, RuntimeError) as e:
        log("glibc client skipped:", e)
        return
    for name, path in (("glibc-unixgram", cap.dgram_path), ("glibc-unix", cap.stream_path)):
        def send(path=path):
            for _, text in KINDS:
                # /dev/log in a private mount namespace: a tmpfs over /dev
                # holding a symlink to our socket. The host's /dev is not
                # touched.
                run(["unshare", "-m", "sh", "-c",
                     'mount -t tmpfs none /dev && ln -s "$1" /dev/log && exec "$2" "$3"',
                     "sh", path, binp, text])
        capture(cap, corpus, name, send)


# --- rsyslog as a relay --------------------------------------------------------

def inject(path, lines):
    """Send lines as datagrams to a relay's local input."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    for l in lines:
        s.sendto(l.encode(), path)
    s.close()


def relay_input():
    """What a local application hands the relay: one record per kind."""
    return ["<14>%s app[4242]: %s" % (time.strftime("%b %e %H:%M:%S"), t) for _, t in KINDS]


def start_daemon(args, ready_path, env=None):
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 15
    while not os.path.exists(ready_path):
        if p.poll() is not None:
            raise RuntimeError("%s exited: %s" % (args[0], p.stdout.read().decode(errors="replace")))
        if time.monotonic() > deadline:
            p.kill()
            raise RuntimeError("%s did not open %s" % (args[0], ready_path))
        time.sleep(0.02)
    return p


def stop_daemon(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def relay(cap, corpus, name, daemon, expect):
    """Capture what a relay daemon forwards: start it (daemon returns the
    process and its input socket), inject the records, wait until expect
    records arrived, stop it."""
    cap.reset()
    try:
        p, inp = daemon()
    except (OSError, RuntimeError) as e:
        log(name, "skipped:", e)
        return
    try:
        inject(inp, relay_input())
        cap.wait(lambda: sum(1 for _, r in cap.records() if r.startswith(b"<")) >= expect, name + " output")
    except (OSError, TimeoutError) as e:
        log(name, "skipped:", e)
        stop_daemon(p)
        return
    stop_daemon(p)
    cap.settle()
    corpus.add(name, cap.records())


RSYSLOG_ACTIONS = {
    "rsyslog-fwd-udp-forward": 'action(type="omfwd" target="127.0.0.1" port="{udp}" protocol="udp" template="RSYSLOG_ForwardFormat")',
    "rsyslog-fwd-udp-traditional": 'action(type="omfwd" target="127.0.0.1" port="{udp}" protocol="udp" template="RSYSLOG_TraditionalForwardFormat")',
    "rsyslog-fwd-udp-protocol23": 'action(type="omfwd" target="127.0.0.1" port="{udp}" protocol="udp" template="RSYSLOG_SyslogProtocol23Format")',
    "rsyslog-fwd-tcp-forward": 'action(type="omfwd" target="127.0.0.1" port="{tcp}" protocol="tcp" template="RSYSLOG_ForwardFormat")',
    "rsyslog-fwd-tcp-octet-protocol23": 'action(type="omfwd" target="127.0.0.1" port="{tcp}" protocol="tcp" TCP_Framing="octet-counted" template="RSYSLOG_SyslogProtocol23Format")',
    "rsyslog-omuxsock": '$OMUxSockSocket {dgram}\n*.* :omuxsock:',
}


def rsyslog_relays(cap, corpus, tmp):
    bin_ = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
    if not os.path.exists(bin_):
        log("rsyslog skipped: not installed")
        return
    for name, action in RSYSLOG_ACTIONS.items():
        def daemon(action=action, name=name):
            d = tempfile.mkdtemp(dir=tmp)
            inp = os.path.join(d, "in.sock")
            # Defaults but the message size: rsyslog's 8k would cut the
            # 10 KB record, which is not what this corpus is about.
            conf = ('global(workDirectory="{d}" maxMessageSize="64k")\n'
                    'module(load="imuxsock" SysSock.Use="off")\n'
                    'module(load="omuxsock")\n'
                    'input(type="imuxsock" Socket="{inp}")\n' + action + "\n").format(
                d=d, inp=inp, udp=cap.udp_port, tcp=cap.tcp_port, dgram=cap.dgram_path)
            with open(os.path.join(d, "rsyslog.conf"), "w") as f:
                f.write(conf)
            return start_daemon([bin_, "-n", "-f", os.path.join(d, "rsyslog.conf"), "-i", os.path.join(d, "pid")], inp), inp
        relay(cap, corpus, name, daemon, len(KINDS))


# --- syslog-ng as a relay ------------------------------------------------------

SYSLOGNG_DESTS = {
    "syslog-ng-network-tcp": 'network("127.0.0.1" port({tcp}) transport("tcp"))',
    "syslog-ng-network-udp": 'network("127.0.0.1" port({udp}) transport("udp"))',
    "syslog-ng-syslog-tcp": 'syslog("127.0.0.1" port({tcp}) transport("tcp"))',
    "syslog-ng-unix-stream": 'unix-stream("{stream}")',
    "syslog-ng-unix-dgram": 'unix-dgram("{dgram}")',
}


def syslogng_relays(cap, corpus, tmp):
    prefix = os.environ.get("SYSLOG_NG_PREFIX", os.path.expanduser("~/.cache/logagg/syslog-ng"))
    bin_ = os.path.join(prefix, "usr/sbin/syslog-ng")
    if not os.path.exists(bin_):
        log("syslog-ng skipped: not at", bin_)
        return
    libdir = os.path.join(prefix, "usr/lib/syslog-ng")
    for name, dest in SYSLOGNG_DESTS.items():
        def daemon(dest=dest):
            d = tempfile.mkdtemp(dir=tmp)
            inp = os.path.join(d, "in.sock")
            conf = ('@version: 3.38\n'
                    'options {{ stats_freq(0); log_msg_size(65536); }};\n'
                    'source s_in {{ unix-dgram("{inp}"); }};\n'
                    'destination d_out {{ ' + dest + '; }};\n'
                    'log {{ source(s_in); destination(d_out); }};\n').format(
                inp=inp, tcp=cap.tcp_port, udp=cap.udp_port, stream=cap.stream_path, dgram=cap.dgram_path)
            path = os.path.join(d, "syslog-ng.conf")
            with open(path, "w") as f:
                f.write(conf)
            env = dict(os.environ, LD_LIBRARY_PATH=libdir)
            args = [bin_, "-F", "-f", path, "--module-path=" + os.path.join(libdir, "3.38"),
                    "--persist-file=" + os.path.join(d, "persist"), "--pidfile=" + os.path.join(d, "pid"),
                    "--control=" + os.path.join(d, "ctl")]
            return start_daemon(args, inp, env), inp
        relay(cap, corpus, name, daemon, len(KINDS))


# --- hand-written edge cases -----------------------------------------------------

HANDMADE = [
    # No timestamp (Python's default shape), PRI and bare text.
    "<158>pyapp[1]: hi", "<158>pyapp: x", "<158>x", "<13>hello big world",
    # Empty bodies, with and without the colon.
    "<14>Nov 23 04:33:41 app[8021]: ", "<14>Nov 23 04:33:41 app:", "<14>Nov 23 04:33:41 app",
    "<13>Nov 23 04:33:41 vm mytag: ", "<13>Nov 23 04:33:41", "<13>",
    # Space-padded and unpadded days, a lower-case month.
    "<30>Nov  3 01:02:03 sshd[99]: Accepted key", "<30>Nov 3 01:02:03 host sshd[99]: one digit",
    "<13>nov 23 04:33:41 host app: lower-case month",
    # The other half of the year: the receive time's UTC offset applies,
    # not the one the local zone has on that date (as rsyslog does).
    "<13>Jun 15 12:00:00 host app: summer",
    # RFC 3339 with fractions and zones.
    "<182>2026-11-23T04:37:27.246351+00:00 vm rsapp[4242]: hi",
    "<14>2026-11-23T04:37:27.246+02:00 host app[1]: plus two",
    "<14>2026-11-23T04:37:27Z host app[1]: zulu",
    "<14>2026-11-23T04:37:27.5Z host app[1]: zulu half",
    "<14>2026-11-23T04:37:27.123456-05:30 host app[1]: minus five thirty",
    "<14>2026-11-23T04:37:27.123456789Z host app[1]: nanoseconds",
    "<14>2026-11-23T04:37:27 host app: no zone is no timestamp",
    "<14>2016-12-31T23:59:60Z host app: leap second",
    # Fractions and Cisco/Brocade/HP shapes of RFC 3164.
    "<14>Nov 23 04:33:41.123 host app: fraction", "<189>Nov 23 2026 04:33:41: %SYS-5-CONFIG_I: Configured",
    "<13>2026 Nov 23 04:33:41 host app: year first", "<13>2026 Nov 23 04:33:41",
    "<13> Nov 23 04:33:41 host app: space first",
    # Control bytes, a trailing NUL, an inner NUL.
    "<14>Nov 23 04:33:41 app[1]: \x1b[31mred\x1b[0m", "<14>Nov 23 04:33:41 host app: a\x01b\x7fc\td",
    "<158>Nov 23 04:33:41 pyapp[1]: c\x00", "<158>pyapp[1]: no timestamp\x00",
    "<13>Nov 23 04:33:41 host app: inner\x00nul",
    # TAGs: a slash, no pid, ended by SP, unusual pids, very long.
    "<22>Nov 23 04:33:41 mail postfix/smtpd[123]: connect from x",
    "<22>Nov 23 04:33:41 postfix/smtpd[123]: local postfix",
    "<13>Nov 23 04:33:41 host app: without pid", "<13>Nov 23 04:33:41 host myapp started ok",
    "<13>Nov 23 04:33:41 host app[12: unclosed", "<13>Nov 23 04:33:41 host app[-]: dash pid",
    "<13>Nov 23 04:33:41 host app[]: empty pid", "<13>Nov 23 04:33:41 host [1]: no name",
    "<13>Nov 23 04:33:41 host caf\u00e9[1]: non-ASCII tag",
    "<13>Nov 23 04:33:41 host " + "t" * 600 + ": very long tag",
    "<13>Nov 23 04:33:41 " + "h" * 520 + " app: very long hostname",
    # Hostnames: IP addresses, FQDN, one that ends the payload, one that is not.
    "<13>Nov 23 04:33:41 192.0.2.10 app[5]: IPv4", "<13>Nov 23 04:33:41 127.0.0.1 app: the sender's own address",
    "<13>Nov 23 04:33:41 web-1.example.com app: fqdn",
    "<13>Nov 23 04:33:41 host-", "<13>Nov 23 04:33:41 host- app: dash-ended host",
    "<13>Nov 23 04:33:41 2001:db8::1 app: IPv6",
    # Headerless: JSON or a bracket after the PRI.
    "<14>{\"a\":1}", "<14>  [x] y",
    # PRIs at the edges and invalid ones.
    "<0>Nov 23 04:33:41 host app: pri zero", "<191>Nov 23 04:33:41 host app: pri max",
    "<013>Nov 23 04:33:41 host app: three digits", "<192>x", "<0013>x", "<>x", "<html><body>",
    # RFC 5424, which logger also sends (go-syslog decodes these).
    "<13>1 2026-11-23T04:33:41.123456+00:00 vm lgapp 42 M1 [x@1 a=\"b\"] hand-made 5424",
    # srslog's default form (a space after the PRI, RFC 3339), which rsyslog
    # does not read and we do: zones, fractions, no hostname, nothing after
    # the timestamp; and a space after the PRI that no timestamp follows.
    "<166> 2026-11-26T20:59:03Z vm srsapp[16296]: srslog default",
    "<166> 2026-11-26T20:59:03+01:00 vm.example.com srsapp[1]: zoned",
    "<166> 2026-11-26T20:59:03.123456-05:00 vm dockerd/3f2a1b9c[1]: container",
    "<166> 2026-11-26T20:59:03Z srsapp[16296]: no hostname",
    "<166> 2026-11-26T20:59:03Z", "<166> 2026-11-26T20:59:03Z vm",
    "<166> garbage here: no timestamp", "<166> 2026-11-26T20:59:03 vm srsapp: no zone", "<166>  2026-11-26T20:59:03Z vm a: two spaces",
    # TAGs that say more than app name and pid (Docker's container tags).
    "<30>Nov 26 21:03:52 dockerd/3f2a1b9c[1234]: hello", "<30>Nov 26 21:03:52 myhost docker/web-1[99]: second",
    "<13>Nov 23 04:33:41 host app[7]x: after the pid", "<13>Nov 23 04:33:41 host app[7][8]: two pids",
]


def handmade(corpus):
    for h in HANDMADE:
        corpus.lines.append({"client": "handmade", "transport": "any", "bytes": h.encode("utf-8")})


def main():
    clients = {
        "python": lambda cap, corpus, tmp: python_client(cap, corpus),
        "go": go_client,
        "srslog": srslog_client,
        "logger": logger_client,
        "glibc": glibc_client,
        "rsyslog": rsyslog_relays,
        "syslog-ng": syslogng_relays,
        "handmade": lambda cap, corpus, tmp: handmade(corpus),
    }
    only = list(clients)
    if len(sys.argv) == 3 and sys.argv[1] == "--only":
        only = sys.argv[2].split(",")
    elif len(sys.argv) != 1:
        sys.exit("usage: capture.py [--only CLIENT[,CLIENT...]]  (clients: %s)" % ", ".join(clients))
    unknown = [c for c in only if c not in clients]
    if unknown:
        sys.exit("capture.py: unknown clients %s (known: %s)" % (unknown, ", ".join(clients)))
    tmp = tempfile.mkdtemp(prefix="lgcap")
    try:
        cap = Capture(tmp)
        corpus = Corpus()
        for name, fn in clients.items():
            if name in only:
                fn(cap, corpus, tmp)
        corpus.write(sys.stdout)
        log(len(corpus.lines), "records")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
