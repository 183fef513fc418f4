"""pyfacsev.py PATH: send [facility, severity, text] triples (a JSON list on
stdin) through Python's logging.handlers.SysLogHandler to the unix socket
PATH, each with its own facility and severity, and print our pid.

SysLogHandler maps logging levels to five severities only; mapPriority is
overridden so that all eight can be sent, with the facility set per record,
as an application that logs to different facilities would.
"""
import json
import logging
import logging.handlers
import os
import sys


class Handler(logging.handlers.SysLogHandler):
    severity = 6

    def mapPriority(self, levelName):
        return self.severity


def main():
    handler = Handler(address=sys.argv[1])
    handler.ident = "pyapp: "
    log = logging.getLogger("pyfacsev")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    for facility, severity, text in json.load(sys.stdin):
        handler.facility = facility
        handler.severity = severity
        log.info(text)
    handler.close()
    print(os.getpid())


if __name__ == "__main__":
    main()
