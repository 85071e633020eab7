#!/usr/bin/env python3
"""Per-thread CPU (ticks in one second; 100 = one core), state and wchan of processes,
grouped by thread name with digits folded. Usage: thread_sample.py LABEL:PID [LABEL:PID ...]"""
import os, re, sys, time, collections
pids = [(p.split(':')[0], p.split(':')[1]) for p in sys.argv[1:]]
def snap():
    out = {}
    for label, pid in pids:
        try: tids = os.listdir(f'/proc/{pid}/task')
        except OSError: continue
        for t in tids:
            try:
                comm = open(f'/proc/{pid}/task/{t}/comm').read().strip()
                st = open(f'/proc/{pid}/task/{t}/stat').read()
                f = st[st.rfind(')') + 2:].split()
                wchan = open(f'/proc/{pid}/task/{t}/wchan').read().strip()
            except OSError: continue
            out[(label, t)] = (comm, f[0], int(f[11]) + int(f[12]), wchan)
    return out
a = snap(); time.sleep(1.0); b = snap()
g = collections.defaultdict(lambda: [0, 0, collections.Counter()])
for k, (comm, state, ticks, wchan) in b.items():
    if k not in a: continue
    name = re.sub(r'[0-9a-f]{6}', 'X', comm); name = re.sub(r'\d+', 'N', name)
    e = g[(k[0], name)]; e[0] += 1; e[1] += ticks - a[k][2]; e[2][state + ':' + (wchan or '-')] += 1
for (label, name), (n, ticks, st) in sorted(g.items()):
    print(f'{label} {name:24} threads={n:3} cpu%={ticks:4}  {dict(st.most_common(4))}')
