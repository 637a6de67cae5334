#!/usr/bin/env python3
"""One batch-1 decode step as ncu saw it in sequence (bench/gpu/ncu-step.sh): per kernel, launches, microseconds
and DRAM bytes read, from `ncu --csv --page raw` with gpu__time_duration.sum and dram__bytes_read.sum over
profile-gpu.mjs --model DIR --steps N. The load's finite checks (op_check_finite_*) are dropped; the last tensor-core
launch ends the prompt, two launches follow it (its final norm and LM head), then N decode steps of equal length:
the last is reported.
  python3 bench/gpu/ncu_step_table.py ncu-step.csv STEPS"""
import collections
import csv
import sys


def step_table(path, steps):
    rows = list(csv.reader(open(path, newline='')))
    head = next(i for i, r in enumerate(rows) if r and r[0] == 'ID')
    hdr = rows[head]
    name, us, dram = hdr.index('Kernel Name'), hdr.index('gpu__time_duration.sum'), hdr.index('dram__bytes_read.sum')
    num = lambda s: float(s.replace(',', ''))
    # The row after the header holds the units; names lose their argument lists.
    ks = [(r[name].split('(')[0], num(r[us]), num(r[dram])) for r in rows[head + 2:] if r and not r[name].startswith('op_check_finite')]
    last_tc = max(i for i, k in enumerate(ks) if k[0].startswith('op_gemm_tc'))
    decode = ks[last_tc + 3:]
    if len(decode) % steps:
        raise SystemExit(f'{len(decode)} launches after the prompt do not split into {steps} equal steps')
    per = len(decode) // steps
    agg = collections.OrderedDict()
    for k, t, d in decode[-per:]:
        a = agg.setdefault(k, [0, 0.0, 0.0])
        a[0] += 1
        a[1] += t
        a[2] += d
    return per, agg


if __name__ == '__main__':
    per, agg = step_table(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    # ncu reports gpu__time_duration in ns by default.
    total = sum(a[1] for a in agg.values())
    print(f'| kernel (one batch-1 decode step, serialized by ncu) | launches | us | us a launch | DRAM MB | TB/s |')
    print('|---|---|---|---|---|---|')
    for k, (n, t, d) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f'| {k} | {n} | {t / 1e3:.1f} | {t / 1e3 / n:.2f} | {d / 1e6:.1f} | {d / t / 1e3 if t else 0:.2f} |')
    print(f'| all ({per} launches) | {per} | {total / 1e3:.1f} | | | |')
