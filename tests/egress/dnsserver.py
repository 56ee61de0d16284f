#!/usr/bin/env python3
"""A tiny authoritative DNS server for the egress tests (UDP only).

Answers A and AAAA from a zone file the test writes:
  {"name": {"A": ["11.1.1.2"], "AAAA": ["fd00:ec2::254"]},
   "rebind.test": {"A_sequence": [["11.1.1.2"], ["10.0.0.1"]]}}
A_sequence answers the Nth A query with the Nth list (the last one after
that): a rebinding resolver, public first, private second. Every query is
appended to the log file as one JSON line {"name", "type"}, so a test can
tell that a name was never looked up. Names not in the zone: NXDOMAIN.

Usage: dnsserver.py LISTEN_IP PORT ZONE_FILE LOG_FILE   (prints "ready")
"""
import ipaddress
import json
import socket
import struct
import sys


def parse_question(msg):
    labels, i = [], 12
    while True:
        n = msg[i]
        if n == 0:
            i += 1
            break
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, qclass = struct.unpack("!HH", msg[i:i + 4])
    return ".".join(labels), qtype, i + 4


def main():
    ip, port, zone_file, log_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(zone_file) as f:
        zone = {k.lower(): v for k, v in json.load(f).items()}
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((ip, port))
    print("ready", flush=True)
    counts = {}
    log = open(log_file, "a", buffering=1)
    while True:
        msg, peer = s.recvfrom(4096)
        try:
            name, qtype, qend = parse_question(msg)
        except (IndexError, struct.error):
            continue
        lname = name.lower()
        log.write(json.dumps({"name": lname, "type": qtype}) + "\n")
        (tid, flags) = struct.unpack("!HH", msg[:4])
        entry = zone.get(lname)
        answers = []
        if entry is not None:
            if qtype == 1:
                if "A_sequence" in entry:
                    n = counts.get(lname, 0)
                    counts[lname] = n + 1
                    seq = entry["A_sequence"]
                    answers = [(1, ipaddress.IPv4Address(a).packed) for a in seq[min(n, len(seq) - 1)]]
                else:
                    answers = [(1, ipaddress.IPv4Address(a).packed) for a in entry.get("A", [])]
            elif qtype == 28:
                answers = [(28, ipaddress.IPv6Address(a).packed) for a in entry.get("AAAA", [])]
        rcode = 0 if entry is not None else 3
        rflags = 0x8400 | (flags & 0x0100) | rcode  # response, authoritative, RD copied
        out = struct.pack("!HHHHHH", tid, rflags, 1, len(answers), 0, 0) + msg[12:qend]
        for t, data in answers:
            out += struct.pack("!HHHIH", 0xC00C, t, 1, 5, len(data)) + data
        s.sendto(out, peer)


if __name__ == "__main__":
    main()
